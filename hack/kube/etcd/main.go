// Command etcd is the etcd server of the local real cluster (hack/local-cluster.sh), built
// from the go.etcd.io/etcd/server/v3 module at the version go.mod pins. The server module
// has no main package of its own; etcdmain.Main is what upstream's etcd binary runs.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
