// Command tiny stands in for mesh-host in release/build's tests: it prints its stamped version.
package main

import "fmt"

var version = "v0.0.0-dev"

func main() { fmt.Println(version) }
