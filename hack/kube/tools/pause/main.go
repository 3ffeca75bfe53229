// Command pause is the process of the pod sandbox container on the local real cluster
// (hack/local-cluster.sh): it holds the pod's namespaces open and does nothing else. As
// PID 1 of a pod that shares its process namespace it reaps the orphans it inherits. It
// exits 0 on SIGINT or SIGTERM. Built static (CGO_ENABLED=0) into the image
// fake-dra.local/pause, which containerd is told to use as its sandbox image.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: pause (takes no arguments; exits 0 on SIGINT or SIGTERM)")
		os.Exit(2)
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited, without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
