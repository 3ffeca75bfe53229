// wire-client-go: the kubelet's side of plugin registration, the structured DRA services
// (dra.v1beta1, dra.v1), the device health stream (dra-health v1alpha1, v1) and gRPC
// health, through the upstream generated code of
// k8s.io/kubelet and grpc-go, once per authority form (see ../wire/wire.go).
//
// Usage: wire-client-go --input FILE     (JSON lines on stdout)
//
//	wire-client-go probe SOCKET     (serves the authority probe until killed)
//	wire-client-go metadata FILE... (decodes device metadata files, a JSON line each)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fake-dra/fake-dra/hack/wire-clients/go/wire"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drav1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const version = "grpc-go v1.85.0, k8s.io/kubelet v0.37.2"

func main() {
	if len(os.Args) == 3 && os.Args[1] == "probe" {
		if err := wire.Probe(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 3 && os.Args[1] == "metadata" {
		decodeMetadataFiles(os.Args[2:])
		return
	}
	in := wire.ReadInput()
	out := wire.NewEmitter(version)
	for _, form := range wire.Forms {
		run(in, out, form)
	}
}

func run(in wire.Input, out *wire.Emitter, form wire.Form) {
	call := func(socket, name, kase string, f func(ctx context.Context) (any, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), in.Timeout())
		defer cancel()
		resp, err := f(ctx)
		out.Emit(form.Name, socket, name, kase, resp, err)
	}
	dial := func(socket, path string) *grpc.ClientConn {
		conn, err := form.Dial(path)
		if err != nil {
			out.Emit(form.Name, socket, "dial", "", nil, err)
			return nil
		}
		return conn
	}

	if in.ProbeSocket != "" {
		if conn := dial("probe", in.ProbeSocket); conn != nil {
			call("probe", "probe", "", func(ctx context.Context) (any, error) { return wire.ProbeCall(ctx, conn) })
			conn.Close()
		}
	}

	if conn := dial("registration", in.RegistrationSocket); conn != nil {
		reg := registerapi.NewRegistrationClient(conn)
		call("registration", "pluginregistration.Registration/GetInfo", "", func(ctx context.Context) (any, error) {
			info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
			if err != nil {
				return nil, err
			}
			return map[string]any{
				"type":               info.Type,
				"name":               info.Name,
				"endpoint":           info.Endpoint,
				"supported_versions": nonNil(info.SupportedVersions),
			}, nil
		})
		call("registration", "pluginregistration.Registration/NotifyRegistrationStatus", "", func(ctx context.Context) (any, error) {
			_, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
			return map[string]any{}, err
		})
		conn.Close()
	}

	conn := dial("dra", in.DRASocket)
	if conn == nil {
		return
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	for _, svc := range in.HealthServices {
		call("dra", "grpc.health.v1.Health/Check", svc, func(ctx context.Context) (any, error) {
			resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil {
				return nil, err
			}
			return map[string]any{"status": resp.Status.String()}, nil
		})
	}
	if in.Mode != "structured" {
		return
	}
	claims := in.Structured.Claims

	v1beta1 := drav1beta1.NewDRAPluginClient(conn)
	call("dra", "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources", "all", func(ctx context.Context) (any, error) {
		req := &drav1beta1.NodePrepareResourcesRequest{}
		for _, c := range claims {
			req.Claims = append(req.Claims, &drav1beta1.Claim{Namespace: c.Namespace, Uid: c.UID, Name: c.Name})
		}
		resp, err := v1beta1.NodePrepareResources(ctx, req)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for uid, r := range resp.Claims {
			var devices []map[string]any
			for _, d := range r.GetDevices() {
				devices = append(devices, device(d.RequestNames, d.PoolName, d.DeviceName, d.CdiDeviceIds))
			}
			m[uid] = wire.Entry(r == nil, map[string]any{"error": r.GetError(), "devices": nonNilDevices(devices)})
		}
		return map[string]any{"claims": m}, nil
	})
	call("dra", "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources", "all", func(ctx context.Context) (any, error) {
		req := &drav1beta1.NodeUnprepareResourcesRequest{}
		for _, c := range claims {
			req.Claims = append(req.Claims, &drav1beta1.Claim{Namespace: c.Namespace, Uid: c.UID, Name: c.Name})
		}
		resp, err := v1beta1.NodeUnprepareResources(ctx, req)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for uid, r := range resp.Claims {
			m[uid] = wire.Entry(r == nil, map[string]any{"error": r.GetError()})
		}
		return map[string]any{"claims": m}, nil
	})

	v1 := drav1.NewDRAPluginClient(conn)
	call("dra", "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", "all", func(ctx context.Context) (any, error) {
		req := &drav1.NodePrepareResourcesRequest{}
		for _, c := range claims {
			req.Claims = append(req.Claims, &drav1.Claim{Namespace: c.Namespace, Uid: c.UID, Name: c.Name})
		}
		resp, err := v1.NodePrepareResources(ctx, req)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for uid, r := range resp.Claims {
			var devices []map[string]any
			for _, d := range r.GetDevices() {
				devices = append(devices, device(d.RequestNames, d.PoolName, d.DeviceName, d.CdiDeviceIds))
			}
			m[uid] = wire.Entry(r == nil, map[string]any{"error": r.GetError(), "devices": nonNilDevices(devices)})
		}
		return map[string]any{"claims": m}, nil
	})
	call("dra", "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources", "all", func(ctx context.Context) (any, error) {
		req := &drav1.NodeUnprepareResourcesRequest{}
		for _, c := range claims {
			req.Claims = append(req.Claims, &drav1.Claim{Namespace: c.Namespace, Uid: c.UID, Name: c.Name})
		}
		resp, err := v1.NodeUnprepareResources(ctx, req)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for uid, r := range resp.Claims {
			m[uid] = wire.Entry(r == nil, map[string]any{"error": r.GetError()})
		}
		return map[string]any{"claims": m}, nil
	})

	// The device health stream: the first message, then the stream is cancelled (the
	// plugin would send the list again after every change and periodically).
	healthV1alpha1 := drahealthv1alpha1.NewDRAResourceHealthClient(conn)
	call("dra", "v1alpha1.DRAResourceHealth/NodeWatchResources", "", func(ctx context.Context) (any, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := healthV1alpha1.NodeWatchResources(ctx, &drahealthv1alpha1.NodeWatchResourcesRequest{})
		if err != nil {
			return nil, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return firstMessageError(err)
		}
		cancel()
		devices := []map[string]any{}
		for _, d := range resp.GetDevices() {
			devices = append(devices, deviceHealth(d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName(),
				d.GetHealth().String(), d.GetMessage()))
		}
		return map[string]any{"devices": devices}, nil
	})
	healthV1 := drahealthv1.NewDRAResourceHealthClient(conn)
	call("dra", "v1.DRAResourceHealth/NodeWatchResources", "", func(ctx context.Context) (any, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := healthV1.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
		if err != nil {
			return nil, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return firstMessageError(err)
		}
		cancel()
		devices := []map[string]any{}
		for _, d := range resp.GetDevices() {
			devices = append(devices, deviceHealth(d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName(),
				d.GetHealth().String(), d.GetMessage()))
		}
		return map[string]any{"devices": devices}, nil
	})
}

// firstMessageError is the answer of a health stream whose first Recv failed: a stream
// the plugin closed without sending anything is reported as a response that says so
// (the test then fails on it), any other error as the status.
func firstMessageError(err error) (any, error) {
	if errors.Is(err, io.EOF) {
		return map[string]any{"ended_without_message": true}, nil
	}
	return nil, err
}

func deviceHealth(pool, name, health, message string) map[string]any {
	return map[string]any{"pool": pool, "device": name, "health": health, "message": message}
}

func device(requests []string, pool, name string, ids []string) map[string]any {
	return map[string]any{
		"request_names":  nonNil(requests),
		"pool_name":      pool,
		"device_name":    name,
		"cdi_device_ids": nonNil(ids),
	}
}

// nonNil keeps empty lists as [] (not null) in the output, as the Python client prints them.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilDevices(d []map[string]any) []map[string]any {
	if d == nil {
		return []map[string]any{}
	}
	return d
}
