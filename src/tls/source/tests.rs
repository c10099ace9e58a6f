use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::source::FnSource;
use crate::test_support::pki::Ca;
use crate::tls::IdentityStore;

/// A source of `pems` in turn, the last one again and again, counting its reads.
fn in_turn(name: &str, pems: Vec<String>) -> (FnSource, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    let source = FnSource::new(name, move || {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        let pem = pems[n.min(pems.len() - 1)].clone().into_bytes();
        async move { Ok::<_, std::convert::Infallible>(pem) }
    });
    (source, reads)
}

/// The kubelet swapped `..data` after the chain was read and before the key was: the
/// chain read again after the key has moved, and the pair is read again, never the
/// old certificate presented with the new key (nor refused as a mismatch).
#[tokio::test]
async fn a_swap_between_the_two_reads_is_read_again_never_paired_across() {
    let ca = Ca::new("pods");
    let (old, new) = (
        ca.client("pod", Duration::from_secs(3600)),
        ca.client("pod", Duration::from_secs(3600)),
    );
    let (chain, chain_reads) = in_turn("chain", vec![old.chain(), new.chain()]);
    let (key, key_reads) = in_turn("key", vec![new.key_pem.clone()]);
    let files = PemFiles {
        paths: ["/pod/chain.pem".into(), "/pod/key.pem".into()],
        sources: [chain, key],
    };
    let identity = IdentityStore::builder(files)
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    assert_eq!(identity.certificate().fingerprint, new.fingerprint());
    // The old chain, the new one after the key, the key again and the new chain again.
    assert_eq!(chain_reads.load(Ordering::SeqCst), 3);
    assert_eq!(key_reads.load(Ordering::SeqCst), 2);
    assert_eq!(identity.status().failures, 0);
}

/// Files that go on changing faster than they are read: after the reads it waits, the
/// pair read last is left to the key check, which refuses it, naming both files.
#[tokio::test]
async fn files_that_never_settle_are_left_to_the_key_check() {
    let ca = Ca::new("pods");
    let chains: Vec<String> = (0..8)
        .map(|_| ca.client("pod", Duration::from_secs(3600)).chain())
        .collect();
    let other = ca.client("pod", Duration::from_secs(3600));
    let (chain, chain_reads) = in_turn("chain", chains);
    let (key, _) = in_turn("key", vec![other.key_pem.clone()]);
    let files = PemFiles {
        paths: ["/pod/chain.pem".into(), "/pod/key.pem".into()],
        sources: [chain, key],
    };
    let err = IdentityStore::builder(files).load().await.unwrap_err();
    let chain_text = crate::store::Chain(&err).to_string();
    assert!(
        chain_text.contains("certificate /pod/chain.pem and key /pod/key.pem"),
        "{chain_text}"
    );
    assert!(chain_text.contains("does not match"), "{chain_text}");
    assert_eq!(chain_reads.load(Ordering::SeqCst), 1 + SWAPS_WAITED);
}

#[test]
fn a_certificate_and_key_pair_is_watched_and_re_read_as_its_files_are() {
    let files = PemFiles::new("/pki/client.crt", "/pki/client.key");
    let file = FileSource::new("/pki/client.crt");
    // The timer's backstop of a file: 60 s.
    assert_eq!(
        files.default_refresh_interval(),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        files.default_refresh_interval(),
        file.default_refresh_interval()
    );
    assert_eq!(
        files.paths(),
        [
            PathBuf::from("/pki/client.crt"),
            PathBuf::from("/pki/client.key")
        ]
    );
    assert_eq!(
        files.describe(),
        "certificate /pki/client.crt and key /pki/client.key"
    );
}

/// A certificate's jitter seed is its own: the same PEM read twice has the same one,
/// another certificate another.
#[test]
fn a_pems_seed_is_the_same_read_again_and_another_for_another_pem() {
    let ca = Ca::new("pods");
    let hour = Duration::from_secs(3600);
    let (one, two) = (ca.client("pod", hour), ca.client("pod", hour));
    let seed = |pem: String| {
        let parsed =
            <crate::tls::identity::Identity as Parse>::parse(pem.as_bytes(), SystemTime::now());
        parsed.unwrap().seed()
    };
    assert_eq!(seed(one.combined()), seed(one.combined()));
    assert_ne!(seed(one.combined()), seed(two.combined()));
}
