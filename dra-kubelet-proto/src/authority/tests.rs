//! The rewriter on hand-built frames and HPACK blocks.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use proptest::prelude::*;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    FrameHeader {
        length: payload.len(),
        kind,
        flags,
        stream,
    }
    .write(&mut out);
    out.extend_from_slice(payload);
    out
}

fn int(value: usize, prefix: u8, leading: u8, out: &mut Vec<u8>) {
    loona_hpack::encoder::encode_integer_into(value, prefix, leading, out).unwrap();
}

fn string(s: &[u8], out: &mut Vec<u8>) {
    int(s.len(), 7, 0, out);
    out.extend_from_slice(s);
}

/// HPACK representations a client may use, written out by hand.
enum Field<'a> {
    /// Indexed (static 1..=61, dynamic 62..).
    Indexed(usize),
    /// Literal with incremental indexing, new name.
    Indexing(&'a [u8], &'a [u8]),
    /// Literal without indexing, new name.
    Plain(&'a [u8], &'a [u8]),
    /// Literal without indexing, name from the table.
    IndexedName(usize, &'a [u8]),
    /// Dynamic table size update.
    SizeUpdate(usize),
}

fn block(fields: &[Field<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in fields {
        match f {
            Field::Indexed(i) => int(*i, 7, 0x80, &mut out),
            Field::Indexing(n, v) => {
                out.push(0x40);
                string(n, &mut out);
                string(v, &mut out);
            }
            Field::Plain(n, v) => {
                out.push(0x00);
                string(n, &mut out);
                string(v, &mut out);
            }
            Field::IndexedName(i, v) => {
                int(*i, 4, 0x00, &mut out);
                string(v, &mut out);
            }
            Field::SizeUpdate(s) => int(*s, 5, 0x20, &mut out),
        }
    }
    out
}

/// A gRPC request's header block with `authority`.
fn request(authority: &[u8]) -> Vec<u8> {
    block(&[
        Field::Indexed(3), // :method POST
        Field::Indexed(6), // :scheme http
        Field::IndexedName(4, b"/pluginregistration.Registration/GetInfo"),
        Field::IndexedName(1, authority), // :authority
        Field::Plain(b"content-type", b"application/grpc"),
        Field::Plain(b"te", b"trailers"),
    ])
}

const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];

fn connection(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = CLIENT_PREFACE.to_vec();
    out.extend_from_slice(&SETTINGS);
    for f in frames {
        out.extend_from_slice(f);
    }
    out
}

/// Splits what the server receives into frames and decodes every header block.
#[derive(Debug, PartialEq)]
enum Seen {
    Headers {
        stream: u32,
        end_stream: bool,
        priority: Option<[u8; 5]>,
        fields: Vec<(String, String)>,
        frames: usize,
    },
    Other(Vec<u8>),
}

fn server_view(bytes: &[u8]) -> Vec<Seen> {
    assert_eq!(&bytes[..24], CLIENT_PREFACE);
    let mut rest = &bytes[24..];
    let mut decoder = loona_hpack::Decoder::new();
    let mut seen = Vec::new();
    struct Open {
        stream: u32,
        end_stream: bool,
        priority: Option<[u8; 5]>,
        fragment: Vec<u8>,
        frames: usize,
    }
    let mut open: Option<Open> = None;
    while !rest.is_empty() {
        let header = FrameHeader::parse(rest[..9].try_into().unwrap());
        assert!(
            header.length <= MIN_MAX_FRAME_SIZE,
            "frame too large for a peer"
        );
        let payload = &rest[9..9 + header.length];
        match header.kind {
            TYPE_HEADERS => {
                assert_eq!(header.flags & FLAG_PADDED, 0);
                let (priority, fragment) = if header.flags & FLAG_PRIORITY != 0 {
                    (Some(payload[..5].try_into().unwrap()), &payload[5..])
                } else {
                    (None, payload)
                };
                open = Some(Open {
                    stream: header.stream,
                    end_stream: header.flags & FLAG_END_STREAM != 0,
                    priority,
                    fragment: fragment.to_vec(),
                    frames: 1,
                });
            }
            TYPE_CONTINUATION => {
                let o = open.as_mut().unwrap();
                assert_eq!(o.stream, header.stream);
                o.fragment.extend_from_slice(payload);
                o.frames += 1;
            }
            _ => seen.push(Seen::Other(rest[..9 + header.length].to_vec())),
        }
        if matches!(header.kind, TYPE_HEADERS | TYPE_CONTINUATION)
            && header.flags & FLAG_END_HEADERS != 0
        {
            let Open {
                stream,
                end_stream,
                priority,
                fragment,
                frames,
            } = open.take().unwrap();
            let fields = decoder
                .decode(&fragment)
                .unwrap()
                .into_iter()
                .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
                .collect();
            seen.push(Seen::Headers {
                stream,
                end_stream,
                priority,
                fields,
                frames,
            });
        }
        rest = &rest[9 + header.length..];
    }
    assert!(open.is_none(), "header block left open");
    seen
}

fn authority_of(seen: &Seen) -> Option<&str> {
    match seen {
        Seen::Headers { fields, .. } => fields
            .iter()
            .find(|(n, _)| n == ":authority")
            .map(|(_, v)| v.as_str()),
        Seen::Other(_) => None,
    }
}

fn rewrite(input: &[u8]) -> Result<Vec<u8>, RewriteError> {
    let mut out = Vec::new();
    Rewriter::new("localhost").feed(input, &mut out)?;
    Ok(out)
}

const SOCKET: &[u8] = b"/var/lib/kubelet/plugins_registry/fake.resource.3-shake.com.sock";

#[test]
fn replaces_the_path_authority_and_keeps_every_other_frame() {
    let data = frame(0x0, 0x1, 1, b"\0\0\0\0\x05hello");
    let window = frame(0x8, 0, 0, &[0, 0, 0x10, 0]);
    let input = connection(&[
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &request(SOCKET)),
        data.clone(),
        window.clone(),
    ]);
    let seen = server_view(&rewrite(&input).unwrap());
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[0], Seen::Other(SETTINGS.to_vec()));
    assert_eq!(authority_of(&seen[1]), Some("localhost"));
    let Seen::Headers { fields, .. } = &seen[1] else {
        panic!()
    };
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            ":method",
            ":scheme",
            ":path",
            ":authority",
            "content-type",
            "te"
        ]
    );
    assert_eq!(fields[2].1, "/pluginregistration.Registration/GetInfo");
    assert_eq!(seen[2], Seen::Other(data));
    assert_eq!(seen[3], Seen::Other(window));
}

#[test]
fn every_authority_form_becomes_localhost() {
    let encoded = grpc_go_encoded_authority(std::str::from_utf8(SOCKET).unwrap());
    let long = "a".repeat(10 * 1024);
    for authority in [
        SOCKET,
        encoded.as_bytes(),
        b"localhost",
        b"",
        long.as_bytes(),
        b"user@[::1]:80",
    ] {
        let input = connection(&[frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            1,
            &request(authority),
        )]);
        let seen = server_view(&rewrite(&input).unwrap());
        assert_eq!(authority_of(&seen[1]), Some("localhost"));
    }
}

#[test]
fn a_block_without_authority_stays_without() {
    let trailers = block(&[Field::Plain(b"grpc-status", b"0")]);
    let input = connection(&[frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS | FLAG_END_STREAM,
        3,
        &trailers,
    )]);
    let seen = server_view(&rewrite(&input).unwrap());
    assert_eq!(
        seen[1],
        Seen::Headers {
            stream: 3,
            end_stream: true,
            priority: None,
            fields: vec![("grpc-status".into(), "0".into())],
            frames: 1,
        }
    );
}

#[test]
fn padding_is_dropped_and_priority_kept() {
    let fragment = request(SOCKET);
    let mut payload = vec![7u8];
    payload.extend_from_slice(&[0x80, 0, 0, 1, 15]);
    payload.extend_from_slice(&fragment);
    payload.extend_from_slice(&[0; 7]);
    let input = connection(&[frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS | FLAG_PADDED | FLAG_PRIORITY | FLAG_END_STREAM,
        5,
        &payload,
    )]);
    let seen = server_view(&rewrite(&input).unwrap());
    let Seen::Headers {
        stream,
        end_stream,
        priority,
        ..
    } = &seen[1]
    else {
        panic!("{seen:?}")
    };
    assert_eq!((*stream, *end_stream), (5, true));
    assert_eq!(*priority, Some([0x80, 0, 0, 1, 15]));
    assert_eq!(authority_of(&seen[1]), Some("localhost"));
}

#[test]
fn padding_longer_than_the_frame_is_refused() {
    let input = connection(&[frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS | FLAG_PADDED,
        1,
        &[200, 0x82],
    )]);
    assert_eq!(rewrite(&input), Err(RewriteError::BadHeadersFrame(1)));
    let empty = connection(&[frame(TYPE_HEADERS, FLAG_END_HEADERS | FLAG_PADDED, 1, &[])]);
    assert_eq!(rewrite(&empty), Err(RewriteError::BadHeadersFrame(1)));
}

#[test]
fn continuation_frames_are_joined() {
    let fragment = request(SOCKET);
    let (a, rest) = fragment.split_at(10);
    let (b, c) = rest.split_at(20);
    let input = connection(&[
        frame(TYPE_HEADERS, 0, 1, a),
        frame(TYPE_CONTINUATION, 0, 1, b),
        frame(TYPE_CONTINUATION, 0, 1, &[]),
        frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, c),
    ]);
    let seen = server_view(&rewrite(&input).unwrap());
    assert_eq!(authority_of(&seen[1]), Some("localhost"));
}

#[test]
fn a_frame_inside_a_header_block_is_refused() {
    let input = connection(&[
        frame(TYPE_HEADERS, 0, 1, &request(SOCKET)),
        frame(0x0, 0, 1, b"x"),
    ]);
    assert_eq!(
        rewrite(&input),
        Err(RewriteError::ExpectedContinuation {
            frame_type: 0,
            stream: 1,
            expected: 1
        })
    );
    let other_stream = connection(&[
        frame(TYPE_HEADERS, 0, 1, &request(SOCKET)),
        frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 3, &[]),
    ]);
    assert!(matches!(
        rewrite(&other_stream),
        Err(RewriteError::ExpectedContinuation { stream: 3, .. })
    ));
    let stray = connection(&[frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &[])]);
    assert_eq!(
        rewrite(&stray),
        Err(RewriteError::UnexpectedContinuation(1))
    );
}

#[test]
fn the_dynamic_table_and_size_updates_are_followed() {
    // First block: a size update, then the path indexed into the dynamic table.
    let first = block(&[
        Field::SizeUpdate(256),
        Field::Indexed(3),
        Field::Indexed(6),
        Field::IndexedName(4, b"/v1alpha3.Node/NodePrepareResources"),
        Field::Indexing(b":authority", SOCKET),
        Field::Indexing(b"x-custom", b"kept"),
    ]);
    // Second block: both taken from the dynamic table (62 = newest, 63 = older).
    let second = block(&[
        Field::Indexed(3),
        Field::Indexed(6),
        Field::IndexedName(4, b"/v1alpha3.Node/NodeUnprepareResources"),
        Field::Indexed(63),
        Field::Indexed(62),
    ]);
    // Third: shrink to zero (evicts everything), then a plain request.
    let third = block(&[Field::SizeUpdate(0), Field::Indexed(3)]);
    let input = connection(&[
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &first),
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &second),
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 5, &third),
    ]);
    let seen = server_view(&rewrite(&input).unwrap());
    assert_eq!(authority_of(&seen[1]), Some("localhost"));
    assert_eq!(authority_of(&seen[2]), Some("localhost"));
    let Seen::Headers { fields, .. } = &seen[2] else {
        panic!()
    };
    assert!(fields.contains(&("x-custom".into(), "kept".into())));
    // After the table shrank, index 62 no longer exists.
    let stale = block(&[Field::Indexed(62)]);
    let input = connection(&[
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &first),
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &third),
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 5, &stale),
    ]);
    assert!(matches!(
        rewrite(&input),
        Err(RewriteError::Hpack { stream: 5, .. })
    ));
}

#[test]
fn a_table_larger_than_http2_allows_is_refused() {
    let input = connection(&[frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        &block(&[Field::SizeUpdate(HEADER_TABLE_SIZE + 1), Field::Indexed(3)]),
    )]);
    assert!(matches!(
        rewrite(&input),
        Err(RewriteError::Hpack { stream: 1, .. })
    ));
}

#[test]
fn huffman_coded_strings_are_decoded() {
    // RFC 7541 C.4.1: ":authority: www.example.com" with a Huffman-coded value.
    let mut fragment = vec![0x82, 0x86, 0x84, 0x41, 0x8c];
    fragment.extend_from_slice(&[
        0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
    ]);
    let input = connection(&[frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &fragment)]);
    let seen = server_view(&rewrite(&input).unwrap());
    assert_eq!(authority_of(&seen[1]), Some("localhost"));
}

#[test]
fn a_long_authority_is_split_over_continuation_frames() {
    let long = vec![b'x'; 40_000];
    let input = connection(&[frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS | FLAG_PRIORITY,
        1,
        &[&[0, 0, 0, 0, 1][..], &request(b"localhost")].concat(),
    )]);
    let mut out = Vec::new();
    Rewriter::new(long.clone()).feed(&input, &mut out).unwrap();
    let seen = server_view(&out);
    let Seen::Headers { frames, .. } = &seen[1] else {
        panic!()
    };
    assert_eq!(*frames, 3);
    assert_eq!(authority_of(&seen[1]).map(str::len), Some(long.len()));
}

#[test]
fn garbage_before_the_preface_is_refused() {
    let mut input = b"GET / HTTP/1.1\r\n".to_vec();
    input.extend_from_slice(CLIENT_PREFACE);
    assert_eq!(rewrite(&input), Err(RewriteError::NoPreface));
    assert_eq!(rewrite(b"P"), Ok(b"P".to_vec()), "a partial preface waits");
    assert_eq!(rewrite(b"PRX"), Err(RewriteError::NoPreface));
}

#[test]
fn header_blocks_and_lists_are_bounded() {
    let huge = frame(TYPE_HEADERS, 0, 1, &vec![0u8; MAX_HEADER_BLOCK + 1024]);
    assert_eq!(
        rewrite(&connection(&[huge])),
        Err(RewriteError::HeaderBlockTooLarge { stream: 1 })
    );
    // A 4 KiB entry referenced 300 times: a small block that decodes to 1.2 MB.
    let big = vec![b'v'; 4000];
    let mut fields = vec![Field::Indexing(b"x", &big)];
    fields.extend((0..300).map(|_| Field::Indexed(62)));
    let input = connection(&[frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &block(&fields))]);
    assert_eq!(
        rewrite(&input),
        Err(RewriteError::HeaderListTooLarge { stream: 1 })
    );
}

#[test]
fn encodes_authorities_like_grpc_go() {
    assert_eq!(
        grpc_go_encoded_authority("/var/lib/kubelet/plugins/x.y/plugin.sock"),
        "%2Fvar%2Flib%2Fkubelet%2Fplugins%2Fx.y%2Fplugin.sock"
    );
    assert_eq!(grpc_go_encoded_authority("a-b_c.d~e"), "a-b_c.d~e");
    assert_eq!(
        grpc_go_encoded_authority("u@[::1]:8!$&'()*+,;="),
        "u@[::1]:8!$&'()*+,;="
    );
    assert_eq!(grpc_go_encoded_authority("a b%/é"), "a%20b%25%2F%C3%A9");
}

#[test]
fn string_lengths_use_the_hpack_integer_encoding() {
    for n in [0, 1, 126, 127, 128, 255, 16_383, 16_384, 1 << 20] {
        let mut ours = Vec::new();
        encode_length(n, &mut ours);
        let mut reference = Vec::new();
        int(n, 7, 0, &mut reference);
        assert_eq!(ours, reference, "{n}");
    }
}

proptest! {
    /// Whatever the read boundaries, the server sees the same bytes.
    #[test]
    fn any_split_of_the_input_gives_the_same_output(
        cuts in proptest::collection::vec(0usize..400, 0..12),
    ) {
        let fragment = request(SOCKET);
        let (a, b) = fragment.split_at(fragment.len() / 2);
        let input = connection(&[
            frame(TYPE_HEADERS, FLAG_PADDED, 1, &[&[3u8][..], a, &[0, 0, 0]].concat()),
            frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, b),
            frame(0x0, 0x1, 1, b"\0\0\0\0\x02hi"),
            frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &request(b"localhost")),
        ]);
        let whole = rewrite(&input).unwrap();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(input.len())).collect();
        cuts.sort_unstable();
        let mut rewriter = Rewriter::new("localhost");
        let mut out = Vec::new();
        let mut at = 0;
        for cut in cuts.into_iter().chain([input.len()]) {
            rewriter.feed(&input[at..cut], &mut out).unwrap();
            at = cut;
        }
        prop_assert_eq!(out, whole);
    }
}

#[test]
fn passthrough_bytes_may_skip_the_rewriter() {
    let payload = vec![7u8; 100];
    let input = connection(&[
        frame(0x0, 0x1, 1, &payload),
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &request(SOCKET)),
    ]);
    let whole = rewrite(&input).unwrap();
    // Feed up to the DATA frame's header, hand its payload on directly, feed the rest.
    let mut rewriter = Rewriter::new("localhost");
    let mut out = Vec::new();
    let head = 24 + 9 + 9;
    rewriter.feed(&input[..head], &mut out).unwrap();
    assert_eq!(rewriter.passthrough_len(), 100);
    out.extend_from_slice(&input[head..head + 60]);
    rewriter.passed(60);
    assert_eq!(rewriter.passthrough_len(), 40);
    out.extend_from_slice(&input[head + 60..head + 100]);
    rewriter.passed(40);
    assert_eq!(rewriter.passthrough_len(), 0);
    rewriter.feed(&input[head + 100..], &mut out).unwrap();
    assert_eq!(out, whole);
}
