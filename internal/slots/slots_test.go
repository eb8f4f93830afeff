package slots

import "testing"

func TestTable(t *testing.T) {
	var tb Table[int]
	a, _ := tb.Take()
	b, _ := tb.Take()
	tb.Items[a], tb.Items[b] = 7, 8
	if a != 0 || b != 1 || tb.Used() != 2 {
		t.Fatalf("got slots %d, %d with %d used, want 0, 1 with 2", a, b, tb.Used())
	}
	tb.Release(a)
	if tb.Used() != 1 {
		t.Errorf("after a release: got %d used, want 1", tb.Used())
	}
	c, old := tb.Take()
	if c != a || old != 7 || tb.Items[c] != 0 {
		t.Errorf("reuse: got slot %d (old %d, now %d), want slot %d, old 7, now 0", c, old, tb.Items[c], a)
	}
	if len(tb.Items) != 2 {
		t.Errorf("the table grew to %d with a free slot, want 2", len(tb.Items))
	}
}

func TestTableSteadyChurnAllocatesNothing(t *testing.T) {
	var tb Table[[4]int64]
	for range 64 {
		tb.Take()
	}
	for i := range int32(64) {
		tb.Release(i)
	}
	if n := testing.AllocsPerRun(1000, func() {
		s, _ := tb.Take()
		tb.Release(s)
	}); n != 0 {
		t.Errorf("Take+Release: got %v allocations, want 0", n)
	}
}
