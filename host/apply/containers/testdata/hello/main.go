// hello is the one program in the image the podman test builds: it prints its greeting
// (GREETING) and, given "serve", stays up until it is asked to stop.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	fmt.Printf("hello %s %q\n", os.Getenv("GREETING"), os.Args[1:])
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
	}
}
