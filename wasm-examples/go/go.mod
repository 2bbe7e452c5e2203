module hello

go 1.24

require wasmloop.dev/action v0.0.0

// The SDK of this repository, as `wasmloop new go` copies it into a project's sdk/.
replace wasmloop.dev/action => ../../sdk/go
