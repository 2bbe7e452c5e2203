// example.com is reserved for examples (RFC 2606): a path there never meets the standard
// library's, nor a module fetched from anywhere. Rename it when you publish the action.
module example.com/{{name}}

go 1.24

require wasmloop.dev/action v0.0.0

// The SDK travels with the project, so that it builds offline.
replace wasmloop.dev/action => ./sdk
