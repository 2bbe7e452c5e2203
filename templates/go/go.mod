module {{name}}

go 1.22

require wasmloop.dev/action v0.0.0

// The SDK travels with the project, so that it builds offline.
replace wasmloop.dev/action => ./sdk
