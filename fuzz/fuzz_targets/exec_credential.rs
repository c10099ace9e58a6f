//! The `ExecCredential` a plugin prints, over arbitrary bytes: never panics, and an error
//! never quotes the credential's token (or its certificate's key). What a run answers
//! with (the token, or the certificate and key), with the credential's expiry, goes
//! through a token store and an identity store whose timers work out when to run the
//! plugin again: never a panic.
#![no_main]

#[path = "common.rs"]
mod common;

use bearer_reload::source::fuzz_parse_credential;
use bearer_reload::tls::IdentityStore;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Err(e) = fuzz_parse_credential(data) else {
        let byte = data.iter().fold(0_u8, |a, b| a.wrapping_add(*b));
        let (now, span) = (
            common::now_from(byte),
            common::span_from(byte.rotate_left(4)),
        );
        let owned = data.to_vec();
        let token = move |_| fuzz_parse_credential(&owned).and_then(|(token, _)| token);
        common::run_tokens(token, now, span);
        let owned = data.to_vec();
        let certificate =
            common::Answer(move |_| fuzz_parse_credential(&owned).and_then(|(_, cert)| cert));
        common::run(IdentityStore::builder(certificate), now, span, |identity| {
            let _ = format!("{identity:?} {:?}", identity.status());
        });
        return;
    };
    let shown = format!("{e} {e:?}");
    let doc: Option<serde_json::Value> = serde_json::from_slice(data).ok();
    for secret in ["token", "clientKeyData"] {
        let value = doc
            .as_ref()
            .and_then(|d| d.get("status"))
            .and_then(|s| s.get(secret))
            .and_then(|t| t.as_str());
        // Short values can be words of the message itself.
        // A value that is also elsewhere in the input (in `kind`, say) may be quoted from
        // there.
        let once = |v: &str| data.windows(v.len()).filter(|w| *w == v.as_bytes()).count() == 1;
        if let Some(value) = value.filter(|v| v.len() >= 12 && once(v)) {
            assert!(
                !shown.contains(value),
                "the error quotes the {secret}: {shown}"
            );
        }
    }
});
