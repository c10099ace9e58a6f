use super::*;

#[test]
fn every_string_of_a_wiped_document_is_emptied_when_it_is_dropped() {
    let mut doc = serde_json::json!({
        "kind": "ExecCredential",
        "status": {"token": "secret", "chain": ["cert", {"key": "pem"}], "n": 1, "ok": true},
    });
    drop(Wiped(&mut doc));
    let wiped = serde_json::json!({
        "kind": "",
        "status": {"token": "", "chain": ["", {"key": ""}], "n": 1, "ok": true},
    });
    assert_eq!(doc, wiped);
}
