#!/usr/bin/env python3
"""The kubelet's side of fake-dra's gRPC services, from grpcio.

Compiles the project's .proto files (dra-kubelet-proto/proto) with grpcio-tools into a temporary
directory at run time, then for each authority form dials the registration socket and
the DRA socket and makes every call the kubelet makes, printing one JSON line per call.

Usage: wire_client.py --input FILE   (the input is described in ../README.md)
"""

import argparse
import importlib
import json
import os
import sys
import tempfile
import urllib.parse

import grpc
import google.protobuf
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_tools import protoc

CLIENT = "grpcio"
VERSION = f"grpcio {grpc.__version__}, protobuf {google.protobuf.__version__}"
LONG_AUTHORITY = "a" * (10 * 1024)

# (form name, the authority for a socket path; None: no grpc.default_authority option).
# Names are shared with the Go client, except "grpcio-default": what grpcio sends for a
# unix: target when not told (1.85: the path without its leading "/", %-encoded).
FORMS = [
    ("encoded-path", lambda p: urllib.parse.quote(p, safe="")),
    ("raw-path", lambda p: p),
    ("localhost", lambda p: "localhost"),
    ("empty", lambda p: ""),
    ("long-10KiB", lambda p: LONG_AUTHORITY),
    ("at-colon-bracket", lambda p: "kubelet@[::1]:10250"),
    ("at-colon-bracket-malformed", lambda p: "a@b@c:d[e"),
    ("grpcio-default", lambda p: None),
]

PROTOS = [
    "pluginregistration/v1/api.proto",
    "dra/v1alpha2/api.proto",
    "dra/v1alpha3/api.proto",
    "dra/v1beta1/api.proto",
    "dra/v1/api.proto",
    "dra-health/v1alpha1/api.proto",
    "dra-health/v1/api.proto",
]


def answers(response):
    """The per-claim answers by claim uid. Upstream declares `map<string, ...> claims = 1`;
    our .proto spells the map as its entry messages (the same bytes on the wire, see
    dra-kubelet-proto/proto/dra/*/api.proto), which grpcio then gives as a list of (key, value)
    entries."""
    return {e.key: e.value for e in response.claims}


def compile_protos(proto_dir, out_dir):
    """Generates *_pb2.py and *_pb2_grpc.py into out_dir and imports them (protoc's
    Python generator writes a `-` of a directory name as `_`: dra-health → dra_health)."""
    args = ["protoc", f"-I{proto_dir}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}"]
    rc = protoc.main(args + PROTOS)
    if rc != 0:
        sys.exit(f"protoc failed ({rc}) on {proto_dir}")
    sys.path.insert(0, out_dir)
    mods = {}
    for p in PROTOS:
        base = p[: -len(".proto")].replace("-", "_").replace("/", ".")
        mods[p.split("/api.proto")[0]] = (
            importlib.import_module(base + "_pb2"),
            importlib.import_module(base + "_pb2_grpc"),
        )
    return mods


class Out:
    def __init__(self, timeout):
        self.timeout = timeout

    def call(self, form, socket, name, case, fn):
        rec = {"client": CLIENT, "version": VERSION, "form": form, "socket": socket,
               "call": name, "case": case}
        try:
            rec["response"] = fn()
            rec["ok"] = True
        except grpc.RpcError as e:
            rec["ok"] = False
            rec["code"] = e.code().name
            rec["message"] = e.details() or ""
        print(json.dumps(rec), flush=True)


def channel(path, authority):
    # A subchannel pool per channel: no connection is shared between forms.
    opts = [("grpc.use_local_subchannel_pool", 1)]
    if authority is not None:
        opts.append(("grpc.default_authority", authority))
    return grpc.insecure_channel("unix:" + path, options=opts)


def run_form(inp, mods, out, form, authority_of):
    t = out.timeout
    reg_pb, reg_grpc = mods["pluginregistration/v1"]

    probe = inp.get("probe_socket")
    if probe:
        with channel(probe, authority_of(probe)) as ch:
            fn = ch.unary_unary("/probe.Probe/WhatAuthority",
                                request_serializer=lambda _: b"",
                                response_deserializer=lambda b: b)
            out.call(form, "probe", "probe", "", lambda: fn(None, timeout=t) and None)

    path = inp["registration_socket"]
    with channel(path, authority_of(path)) as ch:
        reg = reg_grpc.RegistrationStub(ch)

        def get_info():
            info = reg.GetInfo(reg_pb.InfoRequest(), timeout=t)
            return {"type": info.type, "name": info.name, "endpoint": info.endpoint,
                    "supported_versions": list(info.supported_versions)}

        def notify():
            reg.NotifyRegistrationStatus(reg_pb.RegistrationStatus(plugin_registered=True), timeout=t)
            return {}

        out.call(form, "registration", "pluginregistration.Registration/GetInfo", "", get_info)
        out.call(form, "registration", "pluginregistration.Registration/NotifyRegistrationStatus", "", notify)

    path = inp["dra_socket"]
    with channel(path, authority_of(path)) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for svc in inp.get("health_services", []):
            def check(svc=svc):
                r = health.Check(health_pb2.HealthCheckRequest(service=svc), timeout=t)
                return {"status": health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)}
            out.call(form, "dra", "grpc.health.v1.Health/Check", svc, check)
        if inp["mode"] == "classic":
            classic(inp, mods, out, form, ch)
        else:
            structured(inp, mods, out, form, ch)


def classic(inp, mods, out, form, ch):
    t = out.timeout
    good = inp["classic"]["good"]
    bad = inp["classic"]["bad"]
    claims = [good] + bad
    v3, v3_grpc = mods["dra/v1alpha3"]
    node3 = v3_grpc.NodeStub(ch)

    def claim3(c):
        return v3.Claim(namespace=c["namespace"], uid=c["uid"], name=c["name"],
                        resource_handle=c["resource_handle"])

    def prepare3():
        r = node3.NodePrepareResources(
            v3.NodePrepareResourcesRequest(claims=[claim3(c) for c in claims]), timeout=t)
        return {"claims": {uid: {"error": e.error, "cdi_devices": list(e.cdi_devices)}
                           for uid, e in answers(r).items()}}

    def unprepare3():
        r = node3.NodeUnprepareResources(
            v3.NodeUnprepareResourcesRequest(claims=[claim3(c) for c in claims]), timeout=t)
        return {"claims": {uid: {"error": e.error} for uid, e in answers(r).items()}}

    out.call(form, "dra", "v1alpha3.Node/NodePrepareResources", "all", prepare3)
    out.call(form, "dra", "v1alpha3.Node/NodeUnprepareResources", "all", unprepare3)

    v2, v2_grpc = mods["dra/v1alpha2"]
    node2 = v2_grpc.NodeStub(ch)

    def prepare2(c):
        def fn():
            r = node2.NodePrepareResource(v2.NodePrepareResourceRequest(
                namespace=c["namespace"], claim_uid=c["uid"], claim_name=c["name"],
                resource_handle=c["resource_handle"]), timeout=t)
            return {"cdi_devices": list(r.cdi_devices)}
        return fn

    def unprepare2():
        node2.NodeUnprepareResource(v2.NodeUnprepareResourceRequest(
            namespace=good["namespace"], claim_uid=good["uid"], claim_name=good["name"],
            resource_handle=good["resource_handle"]), timeout=t)
        return {}

    for c in claims:
        out.call(form, "dra", "v1alpha2.Node/NodePrepareResource", c["uid"], prepare2(c))
    out.call(form, "dra", "v1alpha2.Node/NodeUnprepareResource", good["uid"], unprepare2)


def structured(inp, mods, out, form, ch):
    t = out.timeout
    claims = inp["structured"]["claims"]
    for version in ["v1beta1", "v1"]:
        pb, pb_grpc = mods[f"dra/{version}"]
        stub = pb_grpc.DRAPluginStub(ch)
        service = f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
        msgs = [pb.Claim(namespace=c["namespace"], uid=c["uid"], name=c["name"]) for c in claims]

        def prepare(stub=stub, pb=pb, msgs=msgs):
            r = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=msgs), timeout=t)
            return {"claims": {uid: {
                "error": e.error,
                "devices": [{"request_names": list(d.request_names), "pool_name": d.pool_name,
                             "device_name": d.device_name,
                             "cdi_device_ids": list(d.cdi_device_ids)} for d in e.devices],
            } for uid, e in answers(r).items()}}

        def unprepare(stub=stub, pb=pb, msgs=msgs):
            r = stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=msgs), timeout=t)
            return {"claims": {uid: {"error": e.error} for uid, e in answers(r).items()}}

        out.call(form, "dra", f"{service}/NodePrepareResources", "all", prepare)
        out.call(form, "dra", f"{service}/NodeUnprepareResources", "all", unprepare)

    # The device health stream: the first message, then the stream is cancelled (the
    # plugin would send the list again after every change and periodically).
    for version in ["v1alpha1", "v1"]:
        pb, pb_grpc = mods[f"dra-health/{version}"]
        stub = pb_grpc.DRAResourceHealthStub(ch)

        def watch(stub=stub, pb=pb):
            stream = stub.NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=t)
            try:
                first = next(stream, None)
            finally:
                stream.cancel()
            if first is None:
                # Closed by the plugin without a message: a response that says so.
                return {"ended_without_message": True}
            return {"devices": [{"pool": d.device.pool_name, "device": d.device.device_name,
                                 "health": health_name(pb, d.health), "message": d.message}
                                for d in first.devices]}

        out.call(form, "dra", f"{version}.DRAResourceHealth/NodeWatchResources", "", watch)


def health_name(pb, value):
    """The enum value's name; a number the .proto does not name as that number."""
    try:
        return pb.HealthStatus.Name(value)
    except ValueError:
        return str(value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True, help="JSON input file")
    args = ap.parse_args()
    with open(args.input) as f:
        inp = json.load(f)
    proto_dir = inp.get("proto_dir") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "dra-kubelet-proto", "proto")
    out = Out(float(inp.get("timeout_seconds", 10)))
    with tempfile.TemporaryDirectory(prefix="wire-client-protos-") as tmp:
        mods = compile_protos(proto_dir, tmp)
        for form, authority_of in FORMS:
            run_form(inp, mods, out, form, authority_of)


if __name__ == "__main__":
    main()
