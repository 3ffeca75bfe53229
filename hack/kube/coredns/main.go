// Command coredns is the cluster DNS of the kind node image (hack/kind-node-image.sh), built
// from the github.com/coredns/coredns module at the version go.mod pins, with the plugins
// kubeadm's Corefile uses (and a few for debugging) instead of all of them: the cloud
// providers' plugins alone pull in most of the module's dependencies, which doubled the
// build on 2 cores. Directive order stays CoreDNS's own (core/dnsserver).
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/debug"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func main() { coremain.Run() }
