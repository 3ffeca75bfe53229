// wire-client-go-classic: the classic kubelet's DRA calls (v1alpha3.Node of kubelets
// 1.28-1.30, v1alpha2.Node of 1.27) through the upstream generated code of
// k8s.io/kubelet v0.30 (the last release that has both) and grpc-go, once per authority
// form (see ../wire/wire.go). Registration and health: wire-client-go.
//
// Usage: wire-client-go-classic --input FILE     (JSON lines on stdout)
package main

import (
	"context"

	"github.com/fake-dra/fake-dra/hack/wire-clients/go/wire"
	"k8s.io/kubelet/pkg/apis/dra/v1alpha2"
	"k8s.io/kubelet/pkg/apis/dra/v1alpha3"
)

const version = "grpc-go v1.85.0, k8s.io/kubelet v0.30.14"

func main() {
	in := wire.ReadInput()
	out := wire.NewEmitter(version)
	if in.Mode != "classic" {
		return
	}
	for _, form := range wire.Forms {
		run(in, out, form)
	}
}

func run(in wire.Input, out *wire.Emitter, form wire.Form) {
	call := func(name, kase string, f func(ctx context.Context) (any, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), in.Timeout())
		defer cancel()
		resp, err := f(ctx)
		out.Emit(form.Name, "dra", name, kase, resp, err)
	}
	conn, err := form.Dial(in.DRASocket)
	if err != nil {
		out.Emit(form.Name, "dra", "dial", "", nil, err)
		return
	}
	defer conn.Close()
	good := in.Classic.Good
	all := append([]wire.Claim{good}, in.Classic.Bad...)

	v3 := v1alpha3.NewNodeClient(conn)
	call("v1alpha3.Node/NodePrepareResources", "all", func(ctx context.Context) (any, error) {
		req := &v1alpha3.NodePrepareResourcesRequest{}
		for _, c := range all {
			req.Claims = append(req.Claims, claim3(c))
		}
		resp, err := v3.NodePrepareResources(ctx, req)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for uid, r := range resp.Claims {
			m[uid] = wire.Entry(r == nil, map[string]any{"error": r.GetError(), "cdi_devices": nonNil(r.GetCDIDevices())})
		}
		return map[string]any{"claims": m}, nil
	})
	call("v1alpha3.Node/NodeUnprepareResources", "all", func(ctx context.Context) (any, error) {
		req := &v1alpha3.NodeUnprepareResourcesRequest{}
		for _, c := range all {
			req.Claims = append(req.Claims, claim3(c))
		}
		resp, err := v3.NodeUnprepareResources(ctx, req)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for uid, r := range resp.Claims {
			m[uid] = wire.Entry(r == nil, map[string]any{"error": r.GetError()})
		}
		return map[string]any{"claims": m}, nil
	})

	v2 := v1alpha2.NewNodeClient(conn)
	prepare2 := func(c wire.Claim) func(ctx context.Context) (any, error) {
		return func(ctx context.Context) (any, error) {
			resp, err := v2.NodePrepareResource(ctx, &v1alpha2.NodePrepareResourceRequest{
				Namespace: c.Namespace, ClaimUid: c.UID, ClaimName: c.Name, ResourceHandle: c.ResourceHandle,
			})
			if err != nil {
				return nil, err
			}
			return map[string]any{"cdi_devices": nonNil(resp.GetCdiDevices())}, nil
		}
	}
	call("v1alpha2.Node/NodePrepareResource", good.UID, prepare2(good))
	for _, bad := range in.Classic.Bad {
		call("v1alpha2.Node/NodePrepareResource", bad.UID, prepare2(bad))
	}
	call("v1alpha2.Node/NodeUnprepareResource", good.UID, func(ctx context.Context) (any, error) {
		_, err := v2.NodeUnprepareResource(ctx, &v1alpha2.NodeUnprepareResourceRequest{
			Namespace: good.Namespace, ClaimUid: good.UID, ClaimName: good.Name, ResourceHandle: good.ResourceHandle,
		})
		return map[string]any{}, err
	})
}

func claim3(c wire.Claim) *v1alpha3.Claim {
	return &v1alpha3.Claim{Namespace: c.Namespace, Uid: c.UID, Name: c.Name, ResourceHandle: c.ResourceHandle}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
