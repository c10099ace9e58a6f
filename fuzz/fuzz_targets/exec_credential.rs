//! The `ExecCredential` a plugin prints, over arbitrary bytes: never panics, and an error
//! never quotes the credential's token (or its certificate's key).
#![no_main]

use bearer_reload::source::fuzz_parse_credential;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Err(e) = fuzz_parse_credential(data) else {
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
