module wasmloop.dev/action

go 1.24
