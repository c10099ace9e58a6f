//! A client identity and a CA bundle read from arbitrary PEM (`tls::IdentityStore`,
//! `tls::RootStore`, through a source that returns the fuzzer's bytes): never panics; a
//! neither a refused read's error nor an accepted identity's status and `Debug` shows any
//! of the key's body. Each store's clock is set from the input and its timer runs, working
//! out the certificates' dates (expiry, the next read): never a panic.
#![no_main]

#[path = "common.rs"]
mod common;

use bearer_reload::source::FnSource;
use bearer_reload::tls::{IdentityStore, RootStore};
use libfuzzer_sys::fuzz_target;

fn source(data: &[u8]) -> FnSource {
    let data = data.to_vec();
    FnSource::new("fuzz", move || {
        let data = data.clone();
        async move { Ok::<_, std::io::Error>(data) }
    })
}

/// What lies between `PRIVATE KEY-----` and the next `-----END` in `data`: the key's body.
fn key_body(data: &[u8]) -> Option<&[u8]> {
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let start = find(data, b"PRIVATE KEY-----")? + 16;
    let end = find(&data[start..], b"-----END")? + start;
    Some(data[start..end].trim_ascii())
}

/// Whether `shown` holds a 16-byte run of the key's body that looks like base64 (with a
/// digit, `+` or `/`: words of the messages, `ClientCertificate`, have none).
fn shows_key(shown: &str, data: &[u8]) -> bool {
    let base64 = |w: &[u8]| {
        w.iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+/".contains(b))
            && w.iter().any(|b| b.is_ascii_digit() || b"+/".contains(b))
    };
    key_body(data).is_some_and(|body| {
        body.windows(16)
            .filter(|w| base64(w))
            .any(|w| shown.as_bytes().windows(16).any(|s| s == w))
    })
}

fuzz_target!(|data: &[u8]| {
    let byte = data.iter().fold(0_u8, |a, b| a.wrapping_add(*b));
    let (now, span) = (
        common::now_from(byte),
        common::span_from(byte.rotate_left(4)),
    );
    let loaded = std::cell::Cell::new(false);
    common::run(
        IdentityStore::builder(source(data)),
        now,
        span,
        |identity| {
            loaded.set(true);
            let shown = format!("{identity:?} {:?}", identity.status());
            assert!(
                !shows_key(&shown, data),
                "the identity shows its key: {shown}"
            );
        },
    );
    if !loaded.get() {
        // Refused (at that time): the error names no key either.
        common::runtime().block_on(async {
            let err = IdentityStore::builder(source(data))
                .no_watch()
                .no_periodic_refresh()
                .load()
                .await
                .err();
            if let Some(e) = err {
                let shown = format!("{e} {e:?}");
                assert!(!shows_key(&shown, data), "the error shows the key: {shown}");
            }
        });
    }
    common::run(RootStore::builder(source(data)), now, span, |roots| {
        let _ = format!("{roots:?} {:?}", roots.status());
    });
    common::runtime().block_on(async {
        let roots = RootStore::builder(source(data))
            .no_watch()
            .no_periodic_refresh()
            .load()
            .await;
        if let Err(e) = roots {
            let shown = format!("{e} {e:?}");
            assert!(!shows_key(&shown, data), "the error shows the key: {shown}");
        }
    });
});
