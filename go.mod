module github.com/gopasta/gopasta

go 1.26.8
