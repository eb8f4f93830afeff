module github.com/gopasta/gopasta

go 1.26.8

require (
	github.com/elastic/go-seccomp-bpf v1.6.0
	github.com/jsimonetti/rtnetlink/v2 v2.3.0
	github.com/landlock-lsm/go-landlock v0.11.2
	github.com/mdlayher/netlink v1.11.2
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/net v0.55.0
	golang.org/x/sys v0.50.0
	golang.org/x/tools v0.45.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/mdlayher/socket v0.6.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/mod v0.36.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	kernel.org/pub/linux/libs/security/libcap/psx v1.2.78 // indirect
)
