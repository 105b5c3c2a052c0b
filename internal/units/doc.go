// Package units parses the byte sizes dnnfs accepts on its command line
// and in session requests: 8GiB, 512MiB, 1G, 4096.
//
// What it owns: the syntax of sizes, rates and durations with units.
// What it must not do: import anything else of dnnfs (the client uses it).
package units
