// Package syscallgraph derives, from a program's code, the system calls
// that can be made once a given function (the one that turns a seccomp
// filter on, the point) has been called: what the filter's allowlist must
// hold. internal/sandbox's tests use it; no binary links it.
//
// # Theory of operation
//
// The program (a main package, loaded for linux and a given GOARCH without
// cgo, as gopasta is built) is turned into SSA (golang.org/x/tools/go/ssa)
// and a call graph: the functions RTA finds reachable from main, their
// calls resolved by VTA, which follows the types of function and interface
// values through assignments, fields and channels, refined on CHA's graph.
//
// VTA joins every function value that reaches a parameter, so a function
// such as (*os.rawConn).Read(f) calls, in its graph, every f that any
// caller ever gave it. The analysis works on an effective graph that
// undoes the join where the code allows: a call whose function value
// comes only from parameters (of its own function, or of the function
// enclosing a function literal that runs only while that function runs)
// has no edges of its own; each call of that function instead has edges
// to the function values it gives those parameters, which run while that
// call does. A caller giving a value that cannot be traced (a field, a map
// entry, a result) gets the graph's edges of the calls it stands for. The
// Go runtime (runtime, internal/runtime/...) is left out of the graph:
// its system calls come mostly from assembly and from code the compiler
// calls, which SSA does not show, and the allowlist justifies them
// separately. Body-less functions that a //go:linkname directive makes
// another package's function count as calls of it.
//
// Code that runs after the point is found from the code itself:
//
//   - the frames: every function that can be on the stack when the point
//     is called (its callers, transitively). In each, the instructions the
//     control flow can reach from a call that leads to the point run after
//     it, and so do the function's deferred calls;
//   - every goroutine started before the point keeps running after it: the
//     go statements that can execute before the point (in a frame, on the
//     way to a call that leads to the point, and in everything those
//     instructions call) start roots. A call that cannot return (os.Exit,
//     known from the code and from Config.NoReturn) ends the control flow,
//     so what a process that exits before the point does is left out, and
//     so is a frame's code that neither leads to the point nor follows it
//     (a process that never gets there);
//   - functions given to runtime.SetFinalizer, runtime.AddCleanup and
//     time.AfterFunc, which the runtime calls when it finds them due (one
//     that cannot be traced to a function is reported).
//
// Everything the effective graph reaches from those roots runs after the
// point. The caller's hand-kept lists, each entry with its reason, correct
// the graph where it is coarser than the program: Sync (functions that run
// what they are given before returning, though their code hands it to
// another goroutine), NotFrame (functions the graph wrongly puts on a path
// to the point), Cut (calls that only happen before the point, or never)
// and Known (calls that lead to system calls the allowlist lacks, waiting
// for a fix: reported apart). An entry that matches nothing in the code is
// reported, so no list outlives the code it is about.
//
// A system call is a call of a primitive: the body-less functions of
// syscall, golang.org/x/sys/unix and internal/runtime/syscall/linux whose
// first parameter is the call's number (trap or num), and every function
// passing a parameter of its own on as that number (syscall.Syscall,
// x/sys/unix's wrappers), found by propagation. The number at a call must
// be a constant, a choice between constants, or a package variable only
// ever set to constants; any other is reported with its position.
package syscallgraph

import (
	"fmt"
	"go/constant"
	"go/token"
	"go/types"
	"os"
	"slices"
	"sort"
	"strings"

	"golang.org/x/tools/go/callgraph"
	"golang.org/x/tools/go/callgraph/cha"
	"golang.org/x/tools/go/callgraph/rta"
	"golang.org/x/tools/go/callgraph/vta"
	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/ssa/ssautil"
)

// Config says what to analyse.
type Config struct {
	// Dir is where the main package is, Pattern names it ("." for Dir).
	Dir, Pattern string
	// GOARCH is the architecture to load the program for (GOOS is linux,
	// cgo is off).
	GOARCH string
	// Point is the function whose call turns the filter on, as
	// ssa.Function.String() names it ("example.com/pkg.install").
	Point string
	// Sync are functions that call the function values given to them
	// as arguments before they return, though their code hands them to
	// another goroutine (Func names the function). A value made before
	// the point and given to one runs before the point.
	Sync []Entry
	// NotFrame are functions that the graph puts on a path of calls to
	// the point but that never lead to it (Func).
	NotFrame []Entry
	// Cut are calls (Caller to Func) that the graph shows but that only
	// happen before the point, or never. A call of Func by name is cut
	// whole (the function values it passes too); a call through a
	// function value or an interface loses its edge to Func only.
	Cut []Entry
	// Known are calls (Caller to Func) that lead to system calls the
	// allowlist lacks, known and waiting for a fix: cut like Cut, and
	// reported in Result.Known with the system calls they lead to.
	Known []Entry
	// NoReturn are functions that never return although their code does
	// not show it (implemented outside Go: syscall.Exit). The others are
	// derived from them.
	NoReturn []string
}

// Entry is one function (or call) of a hand-kept list, with its reason.
// Functions are named as ssa.Function.String() names them:
// "example.com/pkg.F", "(*example.com/pkg.T).M", "example.com/pkg.F$1"
// for F's first function literal.
type Entry struct {
	Func   string
	Caller string // Cut and Known only
	Why    string
}

// Result is what Analyze derived.
type Result struct {
	// Calls are the system calls reachable after the point, by number.
	Calls map[int]*Call
	// Unresolved are calls of primitives, reachable after the point,
	// whose number is not a constant.
	Unresolved []string
	// Stale are hand-kept entries that match nothing in the code, or
	// that change nothing.
	Stale []string
	// Known are the system calls each Config.Known call leads to, in
	// the order of Config.Known; KnownPaths the path to each's caller.
	Known      []map[int]*Call
	KnownPaths [][]string
	// Frames are the functions that can be on the stack when the point
	// is called; Roots the functions the derivation starts from, with
	// why; Reached how many functions run after the point.
	Frames  []string
	Roots   map[string]string
	Reached int

	parent map[*ssa.Function]step
	roots  map[*ssa.Function]string
	fset   *token.FileSet
}

// Call is one system call and where it is made.
type Call struct {
	Nr    int
	Sites []Site
}

// Site is a call of a primitive with a constant number.
type Site struct {
	Fn  *ssa.Function // the function making the call
	Pos token.Position
}

type step struct {
	from *ssa.Function
	pos  token.Pos
}

// edge is a call: where, and to what.
type edge struct {
	site   ssa.CallInstruction
	caller *ssa.Function
	callee *ssa.Function
}

// Analyze loads the program and derives the system calls made after
// cfg.Point: Load, then Program.Analyze.
func Analyze(cfg Config) (*Result, error) {
	p, err := Load(cfg.Dir, cfg.Pattern, cfg.GOARCH)
	if err != nil {
		return nil, err
	}
	return p.Analyze(cfg)
}

// Program is a loaded program and its call graph, ready for Analyze.
type Program struct {
	pkgs     []*packages.Package
	prog     *ssa.Program
	fns      map[*ssa.Function]bool // reachable from main (RTA)
	cha, vta *callgraph.Graph
}

// Load loads the main package that pattern names in dir, for linux and
// goarch without cgo, and builds its SSA and call graph.
func Load(dir, pattern, goarch string) (*Program, error) {
	lc := &packages.Config{
		Mode: packages.LoadAllSyntax,
		Dir:  dir,
		Env:  append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch),
	}
	pkgs, err := packages.Load(lc, pattern)
	if err != nil {
		return nil, err
	}
	var errs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading %s: %s", pattern, strings.Join(errs, "; "))
	}
	if len(pkgs) != 1 || pkgs[0].Name != "main" {
		return nil, fmt.Errorf("%s: want one main package", pattern)
	}
	prog, spkgs := ssautil.AllPackages(pkgs, ssa.InstantiateGenerics)
	prog.Build()
	mainPkg := spkgs[0]
	reach := rta.Analyze([]*ssa.Function{mainPkg.Func("main"), mainPkg.Func("init")}, true)
	p := &Program{pkgs: pkgs, prog: prog, fns: make(map[*ssa.Function]bool, len(reach.Reachable))}
	for f := range reach.Reachable {
		p.fns[f] = true
	}
	p.cha = cha.CallGraph(prog)
	p.vta = vta.CallGraph(p.fns, p.cha)
	return p, nil
}

// Analyze derives the system calls made after cfg.Point (cfg's Dir,
// Pattern and GOARCH are Load's business).
func (p *Program) Analyze(cfg Config) (*Result, error) {
	a := &analysis{cfg: cfg, prog: p.prog, fns: p.fns, cha: p.cha}
	a.index(p.vta)
	a.linknames(p.pkgs)
	return a.run()
}

type analysis struct {
	cfg  Config
	prog *ssa.Program
	fns  map[*ssa.Function]bool

	all      map[*ssa.Function]bool
	cha      *callgraph.Graph
	byName   map[string]*ssa.Function
	raw      map[ssa.CallInstruction][]*ssa.Function // the graph's callees of each call
	rawIn    map[*ssa.Function][]edge                // the graph's calls of each function
	closures map[*ssa.Function][]*ssa.MakeClosure    // where each function literal is made
	links    map[*ssa.Function]*ssa.Function         // body-less functions and the functions a go:linkname makes them
	globals  map[*ssa.Global][]ssa.Value             // values stored into package variables whose address goes nowhere else
	fields   map[fieldKey][]*ssa.FieldAddr           // every address taken of each struct field

	noReturn   map[*ssa.Function]bool
	sync       map[*ssa.Function]bool
	only       map[ssa.Value]int8       // calledOnly's memo: 1 yes (or being decided), 2 no
	out        map[*ssa.Function][]edge // effective calls of each function
	in         map[*ssa.Function][]edge
	cut        map[ssa.CallInstruction]bool // calls cut whole by Config.Cut and Known
	unresolved []string                     // functions registered for later that cannot be traced
	cutEdges   map[edge]bool                // and single edges
	stale      []string
}

// index records the graph's edges by call and by callee, and where every
// function literal is made.
func (a *analysis) index(g *callgraph.Graph) {
	a.byName = map[string]*ssa.Function{}
	a.raw = map[ssa.CallInstruction][]*ssa.Function{}
	a.rawIn = map[*ssa.Function][]edge{}
	a.closures = map[*ssa.Function][]*ssa.MakeClosure{}
	a.fields = map[fieldKey][]*ssa.FieldAddr{}
	for f, n := range g.Nodes {
		if f == nil {
			continue
		}
		for _, e := range n.Out {
			if e.Site == nil {
				continue
			}
			a.raw[e.Site] = append(a.raw[e.Site], e.Callee.Func)
			a.rawIn[e.Callee.Func] = append(a.rawIn[e.Callee.Func], edge{site: e.Site, caller: f, callee: e.Callee.Func})
		}
	}
	a.globals = map[*ssa.Global][]ssa.Value{}
	escaped := map[*ssa.Global]bool{}
	a.all = ssautil.AllFunctions(a.prog)
	for f := range a.all {
		if a.fns[f] {
			a.byName[f.String()] = f
		}
		for _, b := range f.Blocks {
			for _, in := range b.Instrs {
				if mc, ok := in.(*ssa.MakeClosure); ok {
					fn := mc.Fn.(*ssa.Function)
					a.closures[fn] = append(a.closures[fn], mc)
				}
				if fa, ok := in.(*ssa.FieldAddr); ok {
					k := fieldOf(fa)
					a.fields[k] = append(a.fields[k], fa)
				}
				var ops []*ssa.Value
				for _, op := range in.Operands(ops) {
					g, ok := (*op).(*ssa.Global)
					if !ok {
						continue
					}
					switch in := in.(type) {
					case *ssa.Store:
						if in.Addr == g {
							a.globals[g] = append(a.globals[g], in.Val)
							continue
						}
					case *ssa.UnOp:
						if in.Op == token.MUL {
							continue
						}
					}
					escaped[g] = true
				}
			}
		}
	}
	for g := range escaped {
		delete(a.globals, g)
	}
}

func (a *analysis) lookup(list, name string) *ssa.Function {
	f := a.byName[name]
	if f == nil {
		a.stale = append(a.stale, fmt.Sprintf("%s %s: no such function in the program (or none reachable from main)", list, name))
	}
	return f
}

func (a *analysis) run() (*Result, error) {
	point := a.byName[a.cfg.Point]
	if point == nil {
		return nil, fmt.Errorf("the point %s is not in the program (or not reachable from main)", a.cfg.Point)
	}
	a.findNoReturn()
	a.sync = map[*ssa.Function]bool{}
	for _, e := range a.cfg.Sync {
		if f := a.lookup("Sync", e.Func); f != nil {
			a.sync[f] = true
		}
	}
	a.receivedCalls()
	a.effective()
	// A cut call of Func by name loses all its edges (those to the
	// function values it passes too); a cut call through a value or an
	// interface loses the edge to Func only.
	a.cut = map[ssa.CallInstruction]bool{}
	a.cutEdges = map[edge]bool{}
	cutCalls := func(list string, e Entry) []edge {
		from, to := a.lookup(list, e.Caller), a.lookup(list, e.Func)
		if from == nil || to == nil {
			return nil
		}
		var cut []edge
		for _, x := range a.out[from] {
			if x.callee != to {
				continue
			}
			if x.site.Common().StaticCallee() == to {
				a.cut[x.site] = true
			}
			a.cutEdges[x] = true
			cut = append(cut, x)
		}
		if len(cut) == 0 {
			a.stale = append(a.stale, fmt.Sprintf("%s %s -> %s: %s makes no such call", list, e.Caller, e.Func, e.Caller))
		}
		return cut
	}
	for _, e := range a.cfg.Cut {
		cutCalls("Cut", e)
	}
	known := make([][]edge, len(a.cfg.Known))
	for i, e := range a.cfg.Known {
		known[i] = cutCalls("Known", e)
	}

	// The frames: every function that can be on the stack when the point
	// is called, by the graph's calls and the effective ones.
	notFrame := map[*ssa.Function]bool{}
	for _, e := range a.cfg.NotFrame {
		if f := a.lookup("NotFrame", e.Func); f != nil {
			notFrame[f] = true
		}
	}
	frames := map[*ssa.Function]bool{point: true}
	usedNotFrame := map[*ssa.Function]bool{}
	work := []*ssa.Function{point}
	for len(work) > 0 {
		f := work[len(work)-1]
		work = work[:len(work)-1]
		for _, e := range slices.Concat(a.rawIn[f], a.in[f]) {
			c := e.caller
			if frames[c] || a.blocked(e.site, f) {
				continue
			}
			if notFrame[c] {
				usedNotFrame[c] = true
				continue
			}
			frames[c] = true
			work = append(work, c)
		}
	}
	for _, e := range a.cfg.NotFrame {
		if f := a.byName[e.Func]; f != nil && !usedNotFrame[f] {
			a.stale = append(a.stale, fmt.Sprintf("NotFrame %s: not on any path of calls to the point", e.Func))
		}
	}
	// A site is a call that leads to the point.
	isSite := func(in ssa.Instruction) bool {
		c, ok := in.(ssa.CallInstruction)
		if !ok {
			return false
		}
		f := in.Parent()
		for _, callee := range a.raw[c] {
			if frames[callee] && !a.blocked(c, callee) {
				return true
			}
		}
		for _, e := range a.out[f] {
			if e.site == c && frames[e.callee] && !a.blocked(c, e.callee) {
				return true
			}
		}
		return false
	}

	roots := map[*ssa.Function]string{}
	addRoot := func(f *ssa.Function, why string) {
		if _, ok := roots[f]; !ok {
			roots[f] = why
		}
	}
	// Calls made before the point, in frames: the point's own (it turns
	// the filter on at its end), and those on the way to a site.
	var before []ssa.CallInstruction
	for _, b := range point.Blocks {
		for _, in := range b.Instrs {
			if c, ok := in.(ssa.CallInstruction); ok {
				before = append(before, c)
			}
		}
	}
	for f := range frames {
		if f == point {
			continue
		}
		b, after := a.split(f, isSite)
		for _, in := range b {
			if c, ok := in.(ssa.CallInstruction); ok && !isSite(in) {
				before = append(before, c)
			}
		}
		// Deferred calls run when f returns.
		for _, blk := range f.Blocks {
			for _, in := range blk.Instrs {
				if _, ok := in.(*ssa.Defer); ok {
					after = append(after, in)
				}
			}
		}
		for _, in := range after {
			c, ok := in.(ssa.CallInstruction)
			if !ok {
				continue
			}
			for _, e := range a.out[f] {
				if e.site == c && !a.blocked(c, e.callee) {
					addRoot(e.callee, fmt.Sprintf("called after the point by %s at %s", f, a.pos(c.Pos())))
				}
			}
		}
	}

	// Goroutines started before the point: by the frames before their
	// sites, and by everything those calls run.
	seen := map[*ssa.Function]bool{}
	var walk []*ssa.Function
	var beforeFns []*ssa.Function
	visit := func(f *ssa.Function, c ssa.CallInstruction) {
		for _, e := range a.out[f] {
			if e.site != c || a.blocked(c, e.callee) {
				continue
			}
			if _, isGo := c.(*ssa.Go); isGo {
				addRoot(e.callee, fmt.Sprintf("goroutine started before the point by %s at %s", f, a.pos(c.Pos())))
				continue
			}
			if !seen[e.callee] && !frames[e.callee] {
				seen[e.callee] = true
				walk = append(walk, e.callee)
				beforeFns = append(beforeFns, e.callee)
			}
		}
	}
	for _, c := range before {
		visit(c.Parent(), c)
	}
	for len(walk) > 0 {
		f := walk[len(walk)-1]
		walk = walk[:len(walk)-1]
		for _, b := range f.Blocks {
			for _, in := range b.Instrs {
				if c, ok := in.(ssa.CallInstruction); ok {
					visit(f, c)
				}
			}
		}
	}
	// Finalizers and cleanups registered before the point run whenever
	// the runtime finds them due.
	for _, f := range beforeFns {
		for _, fin := range a.finalizers(f) {
			addRoot(fin, fmt.Sprintf("finalizer or cleanup registered before the point by %s", f))
		}
	}
	for f := range frames {
		for _, fin := range a.finalizers(f) {
			addRoot(fin, fmt.Sprintf("finalizer or cleanup registered by %s", f))
		}
	}

	// Everything the roots reach runs after the point.
	r := &Result{Calls: map[int]*Call{}, parent: map[*ssa.Function]step{}, roots: roots, fset: a.prog.Fset, Roots: map[string]string{}}
	queue := make([]*ssa.Function, 0, len(roots))
	for f := range roots {
		queue = append(queue, f)
	}
	sort.Slice(queue, func(i, j int) bool { return queue[i].String() < queue[j].String() })
	reached := map[*ssa.Function]bool{}
	for _, f := range queue {
		reached[f] = true
	}
	for i := 0; i < len(queue); i++ {
		f := queue[i]
		for _, fin := range a.finalizers(f) {
			if !reached[fin] {
				reached[fin] = true
				roots[fin] = fmt.Sprintf("finalizer or cleanup registered after the point by %s", f)
				queue = append(queue, fin)
			}
		}
		for _, e := range a.out[f] {
			to := e.callee
			if reached[to] || a.blocked(e.site, to) {
				continue
			}
			reached[to] = true
			r.parent[to] = step{from: f, pos: e.site.Pos()}
			queue = append(queue, to)
		}
	}
	r.Reached = len(reached)
	for f, why := range roots {
		r.Roots[f.String()] = why
	}
	for f := range frames {
		r.Frames = append(r.Frames, f.String())
	}
	sort.Strings(r.Frames)

	// The system calls.
	prims := a.primitives()
	r.Calls, r.Unresolved = a.scan(queue, prims)
	r.Unresolved = append(r.Unresolved, a.unresolved...)
	for _, cut := range known {
		var from []*ssa.Function
		var sites []ssa.CallInstruction
		for _, x := range cut {
			sites = append(sites, x.site)
			for _, e := range a.out[x.caller] {
				if e.site == x.site && (a.cut[x.site] || e.callee == x.callee) {
					from = append(from, e.callee)
				}
			}
		}
		calls, unresolved := a.scan(a.reach(from), prims)
		r.Unresolved = append(r.Unresolved, unresolved...)
		r.Known = append(r.Known, calls)
		var path []string
		if len(sites) > 0 && reached[sites[0].Parent()] {
			path = r.Path(sites[0].Parent())
		}
		r.KnownPaths = append(r.KnownPaths, path)
	}
	slices.Sort(r.Unresolved)
	r.Unresolved = slices.Compact(r.Unresolved)
	r.Stale = a.stale
	return r, nil
}

// receivedCalls makes up for a gap of VTA (x/tools v0.45): a value
// received with "v, ok := <-ch" or "for v := range ch" reaches no call in
// its graph (the receive's flow goes to the tuple, not to v). A call whose
// function value or interface comes from such a receive gets, on top of
// VTA's callees, the functions (or the methods of the types) sent on
// channels of that element type, and CHA's callees where a sent value
// cannot be traced.
func (a *analysis) receivedCalls() {
	type send struct {
		elem types.Type
		v    ssa.Value
	}
	var sends []send
	for f := range a.fns {
		for _, b := range f.Blocks {
			for _, in := range b.Instrs {
				switch in := in.(type) {
				case *ssa.Send:
					sends = append(sends, send{chanElem(in.Chan), in.X})
				case *ssa.Select:
					for _, st := range in.States {
						if st.Dir == types.SendOnly {
							sends = append(sends, send{chanElem(st.Chan), st.Send})
						}
					}
				}
			}
		}
	}
	for f := range a.fns {
		for _, b := range f.Blocks {
			for _, in := range b.Instrs {
				c, ok := in.(ssa.CallInstruction)
				if !ok || c.Common().StaticCallee() != nil {
					continue
				}
				recv := commaOkRecv(c.Common().Value)
				if recv == nil {
					continue
				}
				elem := chanElem(recv.X)
				var callees []*ssa.Function
				coarse := false
				for _, s := range sends {
					if !types.Identical(s.elem, elem) {
						continue
					}
					if c.Common().IsInvoke() {
						m := c.Common().Method
						if mi, ok := s.v.(*ssa.MakeInterface); ok {
							if fn := a.prog.LookupMethod(mi.X.Type(), m.Pkg(), m.Name()); fn != nil {
								callees = append(callees, fn)
							}
						} else {
							coarse = true
						}
						continue
					}
					if src := a.trace(s.v); src.ok && len(src.params) == 0 {
						callees = append(callees, src.fns...)
					} else {
						coarse = true
					}
				}
				if coarse {
					for _, e := range a.cha.Nodes[f].Out {
						if e.Site == c {
							callees = append(callees, e.Callee.Func)
						}
					}
				}
				for _, g := range callees {
					if !slices.Contains(a.raw[c], g) {
						a.raw[c] = append(a.raw[c], g)
						a.rawIn[g] = append(a.rawIn[g], edge{site: c, caller: f, callee: g})
					}
				}
			}
		}
	}
}

func chanElem(ch ssa.Value) types.Type {
	return ch.Type().Underlying().(*types.Chan).Elem()
}

// commaOkRecv returns the comma-ok receive v comes from (through
// extracts, phis and conversions), or nil.
func commaOkRecv(v ssa.Value) *ssa.UnOp {
	seen := map[ssa.Value]bool{}
	var walk func(v ssa.Value) *ssa.UnOp
	walk = func(v ssa.Value) *ssa.UnOp {
		if seen[v] {
			return nil
		}
		seen[v] = true
		switch x := v.(type) {
		case *ssa.Extract:
			if u, ok := x.Tuple.(*ssa.UnOp); ok && u.Op == token.ARROW && u.CommaOk && x.Index == 0 {
				return u
			}
		case *ssa.Phi:
			for _, e := range x.Edges {
				if u := walk(e); u != nil {
					return u
				}
			}
		case *ssa.ChangeType:
			return walk(x.X)
		case *ssa.ChangeInterface:
			return walk(x.X)
		}
		return nil
	}
	return walk(v)
}

// linknames finds the body-less functions that a //go:linkname
// directive makes another package's function: a call of one is a call of
// the other.
func (a *analysis) linknames(pkgs []*packages.Package) {
	all := map[string]*ssa.Function{}
	for f := range a.all {
		all[f.String()] = f
	}
	a.links = map[*ssa.Function]*ssa.Function{}
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, file := range p.Syntax {
			for _, cg := range file.Comments {
				for _, c := range cg.List {
					f := strings.Fields(c.Text)
					if len(f) != 3 || f[0] != "//go:linkname" {
						continue
					}
					local, target := all[p.PkgPath+"."+f[1]], all[f[2]]
					if local != nil && target != nil && len(local.Blocks) == 0 && len(target.Blocks) > 0 {
						a.links[local] = target
					}
				}
			}
		}
	})
}

// blocked says whether the call c's edge to callee is cut.
func (a *analysis) blocked(c ssa.CallInstruction, callee *ssa.Function) bool {
	return a.cut[c] || a.cutEdges[edge{site: c, caller: c.Parent(), callee: callee}]
}

// reach returns the functions reachable from fns (fns included).
func (a *analysis) reach(fns []*ssa.Function) []*ssa.Function {
	seen := map[*ssa.Function]bool{}
	var out []*ssa.Function
	for _, f := range fns {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for i := 0; i < len(out); i++ {
		for _, e := range a.out[out[i]] {
			if !seen[e.callee] && !a.blocked(e.site, e.callee) {
				seen[e.callee] = true
				out = append(out, e.callee)
			}
		}
	}
	return out
}

// scan returns the system calls fns make, and the calls of primitives
// whose number is not a constant.
func (a *analysis) scan(fns []*ssa.Function, prims map[*ssa.Function]int) (map[int]*Call, []string) {
	calls := map[int]*Call{}
	var unresolved []string
	for _, f := range fns {
		for _, b := range f.Blocks {
			for _, in := range b.Instrs {
				c, ok := in.(ssa.CallInstruction)
				if !ok {
					continue
				}
				callee := c.Common().StaticCallee()
				idx, ok := prims[callee]
				if !ok || idx >= len(c.Common().Args) {
					continue
				}
				nrs, fromParam := a.constants(c.Common().Args[idx])
				if fromParam {
					continue // f is a primitive too: its callers make the call
				}
				if nrs == nil {
					unresolved = append(unresolved, fmt.Sprintf("%s: %s calls %s with a number that is not a constant", a.pos(c.Pos()), f, callee))
					continue
				}
				for _, nr := range nrs {
					call := calls[nr]
					if call == nil {
						call = &Call{Nr: nr}
						calls[nr] = call
					}
					call.Sites = append(call.Sites, Site{Fn: f, Pos: a.prog.Fset.Position(c.Pos())})
				}
			}
		}
	}
	return calls, unresolved
}

func (a *analysis) pos(p token.Pos) string {
	if !p.IsValid() {
		return "(no position)"
	}
	pos := a.prog.Fset.Position(p)
	return fmt.Sprintf("%s:%d", shortPath(pos.Filename), pos.Line)
}

// shortPath cuts a file name to its last two elements.
func shortPath(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) > 2 {
		parts = parts[len(parts)-2:]
	}
	return strings.Join(parts, "/")
}

// split returns f's instructions that run before a site (from which the
// control flow can reach a site) and those that run after one (which the
// control flow can reach from a site). A call that cannot return ends the
// flow.
func (a *analysis) split(f *ssa.Function, isSite func(ssa.Instruction) bool) (before, after []ssa.Instruction) {
	// end[b]: the instructions of b up to the first call that cannot
	// return (included), else all.
	end := map[*ssa.BasicBlock]int{}
	for _, b := range f.Blocks {
		end[b] = len(b.Instrs)
		for i, in := range b.Instrs {
			if a.cannotReturn(in) {
				end[b] = i + 1
				break
			}
		}
	}
	flows := func(b *ssa.BasicBlock) bool { return end[b] == len(b.Instrs) }
	// reaches: from b's start, a site can be reached.
	reaches := map[*ssa.BasicBlock]bool{}
	for changed := true; changed; {
		changed = false
		for _, b := range f.Blocks {
			if reaches[b] {
				continue
			}
			r := slices.ContainsFunc(b.Instrs[:end[b]], isSite)
			if !r && flows(b) {
				r = slices.ContainsFunc(b.Succs, func(s *ssa.BasicBlock) bool { return reaches[s] })
			}
			if r {
				reaches[b] = true
				changed = true
			}
		}
	}
	for _, b := range f.Blocks {
		if !reaches[b] {
			continue
		}
		upto := 0
		for i, in := range b.Instrs[:end[b]] {
			if isSite(in) {
				upto = i + 1
			}
		}
		if flows(b) && slices.ContainsFunc(b.Succs, func(s *ssa.BasicBlock) bool { return reaches[s] }) {
			upto = len(b.Instrs)
		}
		before = append(before, b.Instrs[:upto]...)
	}
	seen := map[*ssa.BasicBlock]bool{}
	var next []*ssa.BasicBlock
	for _, b := range f.Blocks {
		if i := slices.IndexFunc(b.Instrs[:end[b]], isSite); i >= 0 {
			after = append(after, b.Instrs[i+1:end[b]]...)
			if flows(b) {
				next = append(next, b.Succs...)
			}
		}
	}
	for len(next) > 0 {
		b := next[len(next)-1]
		next = next[:len(next)-1]
		if seen[b] {
			continue
		}
		seen[b] = true
		after = append(after, b.Instrs[:end[b]]...)
		if flows(b) {
			next = append(next, b.Succs...)
		}
	}
	return before, after
}

// cannotReturn says whether in is a call of a function that never returns.
func (a *analysis) cannotReturn(in ssa.Instruction) bool {
	c, ok := in.(*ssa.Call)
	if !ok {
		return false
	}
	f := c.Common().StaticCallee()
	return f != nil && a.noReturn[f]
}

// findNoReturn derives the functions that never return: the configured
// ones, and those none of whose paths from the entry reaches a return
// without first calling one of them.
func (a *analysis) findNoReturn() {
	a.noReturn = map[*ssa.Function]bool{}
	for _, name := range a.cfg.NoReturn {
		if f := a.lookup("NoReturn", name); f != nil {
			a.noReturn[f] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for f := range a.fns {
			if !a.noReturn[f] && len(f.Blocks) > 0 && !a.returns(f) {
				a.noReturn[f] = true
				changed = true
			}
		}
	}
}

func (a *analysis) returns(f *ssa.Function) bool {
	seen := map[*ssa.BasicBlock]bool{}
	work := []*ssa.BasicBlock{f.Blocks[0]}
	if f.Recover != nil {
		work = append(work, f.Recover)
	}
	for len(work) > 0 {
		b := work[len(work)-1]
		work = work[:len(work)-1]
		if seen[b] {
			continue
		}
		seen[b] = true
		stopped := false
		for _, in := range b.Instrs {
			if a.cannotReturn(in) {
				stopped = true
				break
			}
			if _, ok := in.(*ssa.Return); ok {
				return true
			}
		}
		if !stopped {
			work = append(work, b.Succs...)
		}
	}
	return false
}

// sources is what a value of function type can be: functions (and
// function literals), and parameters it comes from; ok is false when it
// cannot be traced.
type sources struct {
	fns    []*ssa.Function
	params []*ssa.Parameter
	ok     bool
}

// trace returns the sources of v.
func (a *analysis) trace(v ssa.Value) sources {
	var out sources
	seen := map[ssa.Value]bool{}
	var walk func(v ssa.Value) bool
	walk = func(v ssa.Value) bool {
		if seen[v] {
			return true
		}
		seen[v] = true
		switch x := v.(type) {
		case *ssa.Function:
			out.fns = append(out.fns, x)
			return true
		case *ssa.MakeClosure:
			out.fns = append(out.fns, x.Fn.(*ssa.Function))
			return true
		case *ssa.ChangeType:
			return walk(x.X)
		case *ssa.Phi:
			for _, e := range x.Edges {
				if !walk(e) {
					return false
				}
			}
			return true
		case *ssa.Const:
			return x.IsNil() // a nil function is never called
		case *ssa.Parameter:
			out.params = append(out.params, x)
			return true
		case *ssa.FreeVar:
			b, ok := a.binding(x)
			return ok && walk(b)
		case *ssa.UnOp:
			// A load from a variable, or from a struct field.
			return x.Op == token.MUL && (a.boxValues(x.X, walk) || a.fieldValues(x.X, walk))
		}
		return false
	}
	out.ok = walk(v)
	return out
}

// binding returns the value a function literal's free variable is bound
// to, when the literal is made at one place and runs only while the
// function making it runs (or inside a Sync function).
func (a *analysis) binding(fv *ssa.FreeVar) (ssa.Value, bool) {
	fn := fv.Parent()
	mcs := a.closures[fn]
	if len(mcs) != 1 {
		return nil, false
	}
	mc := mcs[0]
	if !a.inSync(mc.Parent()) && !a.calledOnly(mc) {
		return nil, false
	}
	return mc.Bindings[slices.Index(fn.FreeVars, fv)], true
}

// inSync: f is a Sync function or a function literal inside one.
func (a *analysis) inSync(f *ssa.Function) bool {
	for ; f != nil; f = f.Parent() {
		if a.sync[f] {
			return true
		}
	}
	return false
}

// boxValues calls walk with every value stored into the local variable
// that ptr is the address of (its Alloc, or a function literal's free
// variable capturing it), and reports false when the variable's address
// goes anywhere else (a store through it could not be seen).
func (a *analysis) boxValues(ptr ssa.Value, walk func(ssa.Value) bool) bool {
	for {
		fv, ok := ptr.(*ssa.FreeVar)
		if !ok {
			break
		}
		if ptr, ok = a.binding(fv); !ok {
			return false
		}
	}
	alloc, ok := ptr.(*ssa.Alloc)
	if !ok {
		return false
	}
	// The variable and every free variable capturing it.
	members := []ssa.Value{alloc}
	for i := 0; i < len(members); i++ {
		m := members[i]
		ok := loadsAndStores(m, walk, func(r ssa.Instruction) bool {
			mc, ok := r.(*ssa.MakeClosure)
			if !ok {
				return false
			}
			fn := mc.Fn.(*ssa.Function)
			for k, b := range mc.Bindings {
				if b == m {
					members = append(members, fn.FreeVars[k])
				}
			}
			return true
		})
		if !ok {
			return false
		}
	}
	return true
}

// loadsAndStores calls walk with every value stored through the address
// ptr, and reports false when ptr goes anywhere but a load, a store into
// it or an instruction other accepts (other may be nil: none).
func loadsAndStores(ptr ssa.Value, walk func(ssa.Value) bool, other func(ssa.Instruction) bool) bool {
	refs := ptr.Referrers()
	if refs == nil {
		return false
	}
	for _, r := range *refs {
		switch r := r.(type) {
		case *ssa.Store:
			if r.Addr != ptr || !walk(r.Val) {
				return false
			}
		case *ssa.UnOp:
			if r.Op != token.MUL {
				return false
			}
		case *ssa.DebugRef:
		default:
			if other == nil || !other(r) {
				return false
			}
		}
	}
	return true
}

// fieldKey names a struct field: the struct type and the field's index.
type fieldKey struct {
	st    types.Type
	field int
}

func fieldOf(fa *ssa.FieldAddr) fieldKey {
	return fieldKey{fa.X.Type().Underlying().(*types.Pointer).Elem(), fa.Field}
}

// fieldValues calls walk with every value stored into the struct field
// that ptr is the address of, in any value of the struct anywhere in the
// program, and reports false when ptr is no field's address or the
// field's address goes anywhere but a load or a store into it.
func (a *analysis) fieldValues(ptr ssa.Value, walk func(ssa.Value) bool) bool {
	fa, ok := ptr.(*ssa.FieldAddr)
	if !ok {
		return false
	}
	for _, m := range a.fields[fieldOf(fa)] {
		if !loadsAndStores(m, walk, nil) {
			return false
		}
	}
	return true
}

// calledOnly says whether every use of v (a parameter, a variable or a
// function literal's closure) is a call of it, or a use of that kind,
// while the function it belongs to runs.
func (a *analysis) calledOnly(v ssa.Value) bool {
	if a.only == nil {
		a.only = map[ssa.Value]int8{}
	}
	switch a.only[v] {
	case 1:
		return true
	case 2:
		return false
	}
	if p, ok := v.(*ssa.Parameter); ok && a.sync[p.Parent()] {
		a.only[v] = 1
		return true
	}
	a.only[v] = 1 // assumed while deciding (a cycle of uses is fine)
	ok := a.usesCalledOnly(v)
	if !ok {
		a.only[v] = 2
	}
	return ok
}

func (a *analysis) usesCalledOnly(v ssa.Value) bool {
	refs := v.Referrers()
	if refs == nil {
		return false
	}
	for _, r := range *refs {
		switch r := r.(type) {
		case *ssa.DebugRef:
		case *ssa.ChangeType:
			if !a.calledOnly(r) {
				return false
			}
		case *ssa.Store:
			// Into a local variable: judged by the variable's uses. A
			// store into v, a variable, is judged where the value
			// comes from.
			if r.Val == v {
				if box, ok := r.Addr.(*ssa.Alloc); !ok || !a.calledOnly(box) {
					return false
				}
			}
		case *ssa.UnOp:
			// A load from v, a variable.
			if r.Op != token.MUL || !a.calledOnly(r) {
				return false
			}
		case *ssa.MakeClosure:
			fn := r.Fn.(*ssa.Function)
			for k, b := range r.Bindings {
				if b == v && !a.calledOnly(fn.FreeVars[k]) {
					return false
				}
			}
			if !a.calledOnly(r) {
				return false
			}
		case *ssa.Call, *ssa.Defer:
			c := r.(ssa.CallInstruction).Common()
			if c.IsInvoke() && c.Value == v {
				return false
			}
			for j, arg := range c.Args {
				if arg != v {
					continue
				}
				callees := a.raw[r.(ssa.CallInstruction)]
				if len(callees) == 0 {
					return false
				}
				if c.IsInvoke() {
					j++ // the receiver is the callee's parameter 0
				}
				for _, g := range callees {
					if j >= len(g.Params) || !a.calledOnly(g.Params[j]) {
						return false
					}
				}
			}
		default: // stored, sent, converted, started as a goroutine: escapes
			return false
		}
	}
	return true
}

// inRuntime says whether f is the Go runtime's: its system calls are the
// allowlist's separately justified entries, made mostly from assembly
// and from code the compiler calls, which the graph does not see.
func inRuntime(f *ssa.Function) bool {
	if f.Pkg == nil {
		return false
	}
	p := f.Pkg.Pkg.Path()
	return p == "runtime" || strings.HasPrefix(p, "internal/runtime/")
}

// argFor returns the value call c gives its callee's parameter i (nil if
// none: a variadic tail). An interface method's callee takes the
// receiver as its parameter 0.
func argFor(c ssa.CallInstruction, i int) ssa.Value {
	cc := c.Common()
	if cc.IsInvoke() {
		if i == 0 {
			return cc.Value
		}
		i--
	}
	if i >= len(cc.Args) {
		return nil
	}
	return cc.Args[i]
}

// isFunc: v is of function type.
func isFunc(t types.Type) bool {
	_, ok := t.Underlying().(*types.Signature)
	return ok
}

// effective builds the effective graph (see above).
func (a *analysis) effective() {
	// Pass 1: the calls resolved at their callers' calls (paramSites),
	// and parameters passed on to parameters (flows).
	paramSites := map[*ssa.Parameter][]ssa.CallInstruction{}
	flows := map[*ssa.Parameter][]*ssa.Parameter{}
	own := map[ssa.CallInstruction][]*ssa.Function{} // a resolved call's own callees
	type argUse struct {
		site ssa.CallInstruction
		to   *ssa.Parameter
		src  sources
	}
	var args []argUse
	for f := range a.fns {
		for _, b := range f.Blocks {
			for _, in := range b.Instrs {
				c, ok := in.(ssa.CallInstruction)
				if !ok {
					continue
				}
				cc := c.Common()
				if _, isGo := c.(*ssa.Go); !isGo && !cc.IsInvoke() && cc.StaticCallee() == nil {
					if src := a.trace(cc.Value); src.ok && len(src.params) > 0 {
						own[c] = src.fns
						for _, p := range src.params {
							paramSites[p] = append(paramSites[p], c)
						}
					}
				}
				for _, g := range a.raw[c] {
					for i, p := range g.Params {
						x := argFor(c, i)
						if x == nil || !isFunc(p.Type()) {
							continue
						}
						src := a.trace(x)
						args = append(args, argUse{site: c, to: p, src: src})
						if src.ok {
							for _, q := range src.params {
								flows[q] = append(flows[q], p)
							}
						}
					}
				}
			}
		}
	}
	// called: a parameter whose values are called somewhere.
	called := map[*ssa.Parameter]bool{}
	var isCalled func(p *ssa.Parameter, seen map[*ssa.Parameter]bool) bool
	isCalled = func(p *ssa.Parameter, seen map[*ssa.Parameter]bool) bool {
		if len(paramSites[p]) > 0 || called[p] {
			return true
		}
		if seen[p] {
			return false
		}
		seen[p] = true
		for _, q := range flows[p] {
			if isCalled(q, seen) {
				called[p] = true
				return true
			}
		}
		return false
	}
	// targets: the graph's callees of the calls a parameter's values
	// reach, for callers whose value cannot be traced.
	targets := map[*ssa.Parameter][]*ssa.Function{}
	var targetsOf func(p *ssa.Parameter, seen map[*ssa.Parameter]bool) []*ssa.Function
	targetsOf = func(p *ssa.Parameter, seen map[*ssa.Parameter]bool) []*ssa.Function {
		if t, ok := targets[p]; ok {
			return t
		}
		if seen[p] {
			return nil
		}
		seen[p] = true
		var out []*ssa.Function
		for _, s := range paramSites[p] {
			out = append(out, a.raw[s]...)
		}
		for _, q := range flows[p] {
			out = append(out, targetsOf(q, seen)...)
		}
		return out
	}

	// Pass 2: the edges.
	extra := map[ssa.CallInstruction][]*ssa.Function{}
	for _, u := range args {
		if !isCalled(u.to, map[*ssa.Parameter]bool{}) {
			continue
		}
		if u.src.ok {
			extra[u.site] = append(extra[u.site], u.src.fns...)
		} else {
			extra[u.site] = append(extra[u.site], targetsOf(u.to, map[*ssa.Parameter]bool{})...)
		}
	}
	a.out = map[*ssa.Function][]edge{}
	a.in = map[*ssa.Function][]edge{}
	for f := range a.fns {
		for _, b := range f.Blocks {
			for _, in := range b.Instrs {
				c, ok := in.(ssa.CallInstruction)
				if !ok {
					continue
				}
				callees, resolved := own[c]
				if !resolved {
					callees = a.raw[c]
				}
				callees = append(slices.Clone(callees), extra[c]...)
				for _, g := range callees {
					if t := a.links[g]; t != nil {
						callees = append(callees, t)
					}
				}
				slices.SortFunc(callees, func(x, y *ssa.Function) int { return strings.Compare(x.String(), y.String()) })
				for _, g := range slices.Compact(callees) {
					if inRuntime(g) {
						continue
					}
					e := edge{site: c, caller: f, callee: g}
					a.out[f] = append(a.out[f], e)
					a.in[g] = append(a.in[g], e)
				}
			}
		}
	}
}

// finalizers returns the functions f registers for the runtime to call
// later: with runtime.SetFinalizer, runtime.AddCleanup or time.AfterFunc.
// One it cannot trace to a function is reported (unresolved).
func (a *analysis) finalizers(f *ssa.Function) []*ssa.Function {
	var out []*ssa.Function
	for _, b := range f.Blocks {
		for _, in := range b.Instrs {
			c, ok := in.(ssa.CallInstruction)
			if !ok {
				continue
			}
			callee := c.Common().StaticCallee()
			if callee == nil || callee.Pkg == nil {
				continue
			}
			args := c.Common().Args
			switch pkg, name := callee.Pkg.Pkg.Path(), callee.Name(); {
			case pkg == "runtime" && (name == "SetFinalizer" || strings.HasPrefix(name, "AddCleanup")) && len(args) >= 2:
			case pkg == "time" && name == "AfterFunc" && len(args) == 2:
			default:
				continue
			}
			arg := args[1]
			for {
				if mi, ok := arg.(*ssa.MakeInterface); ok {
					arg = mi.X
				} else if ct, ok := arg.(*ssa.ChangeType); ok {
					arg = ct.X
				} else {
					break
				}
			}
			src := a.trace(arg)
			if !src.ok || len(src.params) > 0 {
				a.unresolved = append(a.unresolved, fmt.Sprintf("%s: %s registers a function with %s that cannot be traced", a.pos(c.Pos()), f, callee))
			}
			out = append(out, src.fns...)
		}
	}
	return out
}

// primitives returns the functions that make a system call whose number
// is their parameter at the index given: the body-less ones of the
// packages that make system calls whose first parameter is named trap or
// num, and every function passing a parameter of its own on to one.
func (a *analysis) primitives() map[*ssa.Function]int {
	prims := map[*ssa.Function]int{}
	for _, pkg := range a.prog.AllPackages() {
		switch pkg.Pkg.Path() {
		case "syscall", "golang.org/x/sys/unix", "internal/runtime/syscall/linux":
		default:
			continue
		}
		for _, m := range pkg.Members {
			f, ok := m.(*ssa.Function)
			if !ok || len(f.Blocks) != 0 || f.Signature.Params().Len() == 0 {
				continue
			}
			p := f.Signature.Params().At(0)
			if (p.Name() == "trap" || p.Name() == "num") && types.Identical(p.Type(), types.Typ[types.Uintptr]) {
				prims[f] = 0
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for f := range a.fns {
			if _, ok := prims[f]; ok {
				continue
			}
			for _, b := range f.Blocks {
				for _, in := range b.Instrs {
					c, ok := in.(ssa.CallInstruction)
					if !ok {
						continue
					}
					idx, ok := prims[c.Common().StaticCallee()]
					if !ok || idx >= len(c.Common().Args) {
						continue
					}
					if _, done := prims[f]; done {
						continue
					}
					if p, ok := underParam(c.Common().Args[idx]); ok {
						prims[f] = slices.Index(f.Params, p)
						changed = true
					}
				}
			}
		}
	}
	return prims
}

// underParam: v is a parameter (through conversions).
func underParam(v ssa.Value) (*ssa.Parameter, bool) {
	for {
		switch x := v.(type) {
		case *ssa.Parameter:
			return x, true
		case *ssa.Convert:
			v = x.X
		case *ssa.ChangeType:
			v = x.X
		default:
			return nil, false
		}
	}
}

// constants returns the values v can take when all are constants;
// fromParam when v is (or may be) a parameter of its function.
func (a *analysis) constants(v ssa.Value) (nrs []int, fromParam bool) {
	seen := map[ssa.Value]bool{}
	var walk func(v ssa.Value) bool
	walk = func(v ssa.Value) bool {
		if seen[v] {
			return true
		}
		seen[v] = true
		switch x := v.(type) {
		case *ssa.Const:
			if x.Value == nil {
				return false
			}
			n, ok := constant.Int64Val(constant.ToInt(x.Value))
			if ok {
				nrs = append(nrs, int(n))
			}
			return ok
		case *ssa.Convert:
			return walk(x.X)
		case *ssa.ChangeType:
			return walk(x.X)
		case *ssa.Phi:
			for _, e := range x.Edges {
				if !walk(e) {
					return false
				}
			}
			return true
		case *ssa.Parameter:
			fromParam = true
		case *ssa.UnOp:
			// A package variable (x/sys/unix's fcntl64Syscall): what
			// is stored into it, when its address goes nowhere else.
			g, ok := x.X.(*ssa.Global)
			if !ok || x.Op != token.MUL || a.globals[g] == nil {
				return false
			}
			for _, st := range a.globals[g] {
				if !walk(st) {
					return false
				}
			}
			return true
		}
		return false
	}
	if !walk(v) {
		return nil, fromParam
	}
	slices.Sort(nrs)
	return slices.Compact(nrs), false
}

// Path returns the shortest chain of calls from a root to f, one line per
// function: the root first with why it is one, then each call with where
// it is made.
func (r *Result) Path(f *ssa.Function) []string {
	var chain []string
	for {
		st, ok := r.parent[f]
		if !ok {
			chain = append(chain, fmt.Sprintf("%s  [%s]", f, r.roots[f]))
			break
		}
		p := r.fset.Position(st.pos)
		chain = append(chain, fmt.Sprintf("%s  (called at %s:%d)", f, shortPath(p.Filename), p.Line))
		f = st.from
	}
	slices.Reverse(chain)
	return chain
}
