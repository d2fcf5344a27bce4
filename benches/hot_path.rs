//! The request path without I/O: decoding a pipeline of requests, looking each up in the
//! command table, routing its keys to a namespace, classifying a backend failure, the retry
//! policy's decision, and encoding a reply. Run with `cargo bench --bench hot_path`; the load
//! benchmark against direct Redis and twemproxy is `benches/load.py`.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use holdfast::backend::{BackendError, Backends, DoubleStyle, Proto};
use holdfast::command::table::Idempotence;
use holdfast::command::Command;
use holdfast::config::{Config, RetryConfig};
use holdfast::error::{self, ErrorClass};
use holdfast::namespace::Router;
use holdfast::resp::{decode_request, encode_reply, Limits, Nils};
use holdfast::retry::backoff::Backoff;
use holdfast::retry::policy::Policy;
use redis_protocol::resp3::types::BytesFrame as Frame;

fn pipeline(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let key = format!("worker:{i}");
        let value = "x".repeat(100);
        for args in [
            vec!["SET", key.as_str(), value.as_str()],
            vec!["GET", key.as_str()],
        ] {
            out.extend(format!("*{}\r\n", args.len()).as_bytes());
            for a in args {
                out.extend(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
            }
        }
    }
    out
}

fn decode_and_parse(c: &mut Criterion) {
    let wire = pipeline(16);
    let mut group = c.benchmark_group("request");
    group.throughput(Throughput::Elements(32));
    group.bench_function("decode+table, 32 pipelined SET/GET", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&wire[..]);
            let mut n = 0;
            while let Ok(Some(args)) = decode_request(&mut buf, &Limits::request(1 << 20)) {
                let command = Command::parse(args).expect("known command");
                n += command.keys().count();
            }
            black_box(n)
        })
    });
    group.finish();
}

fn encode(c: &mut Criterion) {
    let frame = Frame::BlobString {
        data: Bytes::from(vec![b'x'; 100]),
        attributes: None,
    };
    c.bench_function("reply encode, 100-byte bulk, RESP2", |b| {
        let mut out = BytesMut::with_capacity(4096);
        b.iter(|| {
            out.clear();
            encode_reply(
                &mut out,
                black_box(&frame),
                Proto::Resp2,
                Nils::default(),
                DoubleStyle::default(),
            );
            black_box(out.len())
        })
    });
}

fn policy(c: &mut Criterion) {
    let policy = Policy::new(Backoff::new(&RetryConfig::default()).expect("valid"));
    let mut rng = rand::thread_rng();
    c.bench_function("retry policy decision", |b| {
        b.iter(|| {
            black_box(policy.decide(
                black_box(ErrorClass::Transient),
                black_box(Idempotence::Idempotent),
                black_box(3),
                &mut rng,
            ))
        })
    });
}

fn route(c: &mut Criterion) {
    // Backends dial in the background as they are built: a runtime must exist (the dials to
    // a closed port fail quietly; nothing is sent).
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let _inside = runtime.enter();
    let config = Config::from_toml(
        r#"
[backends.cache]
kind = "redis"
url = "redis://127.0.0.1:1"
[[namespaces]]
name = "workers"
prefixes = ["worker:", "job:"]
backend = "cache"
[[namespaces]]
name = "sessions"
prefixes = ["session:"]
backend = "cache"
[[namespaces]]
name = "default"
backend = "cache"
"#,
    )
    .expect("valid configuration");
    let backends = Backends::build(&config, None).expect("backends");
    let router = Router::build(&config, &backends).expect("router");
    let keys: [&[u8]; 3] = [b"worker:17", b"worker:18", b"worker:19"];
    c.bench_function("route 3 keys, 3 namespaces", |b| {
        b.iter(|| black_box(router.route(black_box(keys)).map(|ns| ns.name.len())))
    });
}

fn classify(c: &mut Criterion) {
    let readonly = BackendError::reply(Bytes::from_static(
        b"READONLY You can't write against a read only replica.",
    ));
    let reset = BackendError::Sent {
        source: holdfast::error::LinkError::new(holdfast::error::LinkErrorKind::Io, "reset"),
    };
    c.bench_function("classify an error reply and a lost connection", |b| {
        b.iter(|| {
            (
                black_box(error::classify(black_box(&readonly))),
                black_box(error::classify(black_box(&reset))),
            )
        })
    });
}

criterion_group!(benches, decode_and_parse, route, classify, encode, policy);
criterion_main!(benches);
