// Package wire is what both Go wire clients share: the ways a kubelet (or a client
// configured like one) dials a plugin's unix socket, the input the Rust test hands over,
// and the JSON lines the clients print.
package wire

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Client names the client in every output line.
const Client = "grpc-go"

// LongAuthority is the 10 KiB authority of the "long-10KiB" form.
var LongAuthority = strings.Repeat("a", 10*1024)

// Form is one way of dialing a socket, named as in the Python client.
type Form struct {
	Name string
	// Dial opens a connection to the unix socket at path, or says why it cannot.
	Dial func(path string) (*grpc.ClientConn, error)
}

func unixDialer(ctx context.Context, addr string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, "unix", addr)
}

// dialLikeKubelet dials as kubelets up to 1.33 do for both sockets (the plugin watcher
// and the DRA client): the raw socket path as target, passthrough resolver, a unix
// context dialer, no authority override.
func dialLikeKubelet(path string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(unixDialer),
	}, extra...)
	//nolint:staticcheck // grpc.Dial is deprecated, but it is what those kubelets call.
	return grpc.Dial(path, opts...)
}

// newClient dials as kubelets 1.34+ do for the DRA socket: grpc.NewClient("unix:"+path).
func newClient(path string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, extra...)
	return grpc.NewClient("unix:"+path, opts...)
}

func withAuthority(authority string) func(string) (*grpc.ClientConn, error) {
	return func(path string) (*grpc.ClientConn, error) {
		return newClient(path, grpc.WithAuthority(authority))
	}
}

// Forms are the authority forms, in output order.
var Forms = []Form{
	// grpc-go %-encodes the path it was given as target: what kubelets ≤1.33 send.
	{Name: "encoded-path", Dial: func(path string) (*grpc.ClientConn, error) { return dialLikeKubelet(path) }},
	// The raw path, as older grpc-go sent it (kubelets of 1.27-1.30 era).
	{Name: "raw-path", Dial: func(path string) (*grpc.ClientConn, error) {
		return dialLikeKubelet(path, grpc.WithAuthority(path))
	}},
	// What kubelets 1.34+ send for the DRA socket.
	{Name: "localhost", Dial: func(path string) (*grpc.ClientConn, error) { return newClient(path) }},
	// grpc.WithAuthority("") means "no override", so the empty authority comes from an
	// empty passthrough target; the dialer ignores the (empty) address it is given.
	{Name: "empty", Dial: func(path string) (*grpc.ClientConn, error) {
		//nolint:staticcheck // see dialLikeKubelet.
		return grpc.Dial("passthrough:///",
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				return unixDialer(ctx, path)
			}))
	}},
	{Name: "long-10KiB", Dial: withAuthority(LongAuthority)},
	{Name: "at-colon-bracket", Dial: withAuthority("kubelet@[::1]:10250")},
	{Name: "at-colon-bracket-malformed", Dial: withAuthority("a@b@c:d[e")},
}

// Claim is a claim as the Rust test hands it over (classic claims carry a handle).
type Claim struct {
	Namespace      string `json:"namespace"`
	UID            string `json:"uid"`
	Name           string `json:"name"`
	ResourceHandle string `json:"resource_handle"`
}

// Input is what the Rust test writes (the same file the Python client reads).
type Input struct {
	RegistrationSocket string   `json:"registration_socket"`
	DRASocket          string   `json:"dra_socket"`
	ProbeSocket        string   `json:"probe_socket"`
	Mode               string   `json:"mode"`
	HealthServices     []string `json:"health_services"`
	TimeoutSeconds     float64  `json:"timeout_seconds"`
	Classic            struct {
		Good Claim   `json:"good"`
		Bad  []Claim `json:"bad"`
	} `json:"classic"`
	Structured struct {
		Claims []Claim `json:"claims"`
	} `json:"structured"`
}

// ReadInput parses the flags (--input FILE) and reads the input.
func ReadInput() Input {
	path := flag.String("input", "", "JSON input file (see hack/wire-clients/README.md)")
	flag.Parse()
	if *path == "" {
		fmt.Fprintln(os.Stderr, "usage: --input FILE")
		os.Exit(2)
	}
	raw, err := os.ReadFile(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var in Input
	if err := json.Unmarshal(raw, &in); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if in.TimeoutSeconds == 0 {
		in.TimeoutSeconds = 10
	}
	return in
}

// Timeout bounds one call (a guard against a hang, not a speed check).
func (in Input) Timeout() time.Duration {
	return time.Duration(in.TimeoutSeconds * float64(time.Second))
}

// Record is one output line.
type Record struct {
	Client   string `json:"client"`
	Version  string `json:"version"`
	Form     string `json:"form"`
	Socket   string `json:"socket"`
	Call     string `json:"call"`
	Case     string `json:"case"`
	OK       bool   `json:"ok"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	Response any    `json:"response,omitempty"`
}

// Emitter prints records for one client binary.
type Emitter struct {
	Version string
	enc     *json.Encoder
}

func NewEmitter(version string) *Emitter {
	return &Emitter{Version: version, enc: json.NewEncoder(os.Stdout)}
}

// Emit prints one line: the response when err is nil, else the status code and message.
func (e *Emitter) Emit(form, socket, call, kase string, response any, err error) {
	r := Record{Client: Client, Version: e.Version, Form: form, Socket: socket, Call: call, Case: kase}
	if err == nil {
		r.OK = true
		r.Response = response
	} else {
		st, _ := status.FromError(err)
		r.Code = strings.ToUpper(codeName(st.Code().String()))
		r.Message = st.Message()
	}
	if err := e.enc.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// codeName turns grpc-go's "FailedPrecondition" into "FAILED_PRECONDITION" (the
// canonical names grpcio prints).
func codeName(camel string) string {
	var b strings.Builder
	for i, c := range camel {
		if i > 0 && c >= 'A' && c <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ProbeCall asks the authority probe what it received, with a call no server serves.
func ProbeCall(ctx context.Context, conn *grpc.ClientConn) (any, error) {
	var reply struct{}
	err := conn.Invoke(ctx, "/probe.Probe/WhatAuthority", &emptyMsg{}, &reply, grpc.ForceCodec(rawCodec{}))
	return nil, err
}

// Probe serves the authority probe on a unix socket until killed: every call fails with
// UNIMPLEMENTED and the message `probe-authority:<summary>` (see Summary).
func Probe(path string) error {
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		values := md.Get(":authority")
		if len(values) != 1 {
			return status.Errorf(12, "probe-authority-count:%d", len(values))
		}
		return status.Error(12, "probe-authority:"+Summary(values[0]))
	}))
	fmt.Println("probe listening on", path)
	return srv.Serve(lis)
}

// Summary shortens long authorities so the answer fits the clients' metadata limits:
// `<len>:<first 32>...<last 32>` above 512 bytes, else the authority itself.
func Summary(a string) string {
	if len(a) <= 512 {
		return a
	}
	return fmt.Sprintf("%d:%s...%s", len(a), a[:32], a[len(a)-32:])
}

type emptyMsg struct{}

// rawCodec sends an empty message and ignores the answer (the probe never answers).
type rawCodec struct{}

func (rawCodec) Marshal(any) ([]byte, error) { return nil, nil }
func (rawCodec) Unmarshal([]byte, any) error { return nil }
func (rawCodec) Name() string                { return "proto" }

// Entry is one per-claim answer, read through the getters as kubelets 1.29+ read it. A
// map entry whose value is absent on the wire decodes as a nil pointer with gogo (the
// classic API); kubelet 1.28 reads `result.Error` without the getter and would panic on
// it, so the clients report it as "value_missing".
func Entry(missing bool, e map[string]any) map[string]any {
	if missing {
		e["value_missing"] = true
	}
	return e
}
