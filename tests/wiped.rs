//! Secrets are wiped from memory when the crate lets go of them: a global allocator that,
//! while armed, looks in every block freed for a marker token, and counts the blocks that
//! still hold it. Alone in its binary, because of the allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bearer_reload::TokenStore;
use bearer_reload::source::FileSource;

/// The marker's first bytes; every secret of this test starts with them.
const MARKER: &[u8] = b"wipe-me-3f9c2a71";

static ARMED: AtomicBool = AtomicBool::new(false);
static UNWIPED: AtomicUsize = AtomicUsize::new(0);

/// `System`, that counts the blocks freed while armed that still hold [`MARKER`].
struct Inspecting;

// SAFETY: every call is forwarded to `System` as it came; a block is only read before it
// is given back, within its layout.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Inspecting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ARMED.load(Ordering::Relaxed) {
            let block = unsafe { std::slice::from_raw_parts(ptr, layout.size()) };
            if block.windows(MARKER.len()).any(|w| w == MARKER) {
                UNWIPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A moved block is freed with its old contents: inspect it as a free.
        let new =
            unsafe { self.alloc(Layout::from_size_align_unchecked(new_size, layout.align())) };
        if !new.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Inspecting = Inspecting;

/// A token file read, replaced by a new one and then dropped with its store: no block the
/// crate freed (the read's buffer, the fetched bytes, the tokens' header values) still
/// holds a token.
#[tokio::test(flavor = "current_thread")]
async fn a_token_files_bytes_are_wiped_when_the_store_lets_go_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    let first = [MARKER, b"-first"].concat();
    let second = [MARKER, b"-second"].concat();
    std::fs::write(&path, &first).unwrap();
    // Built before the window, so that their own buffers are not counted.
    let source = FileSource::new(&path);
    let next = path.with_extension("next");
    std::fs::write(&next, &second).unwrap();

    ARMED.store(true, Ordering::SeqCst);
    let store = TokenStore::builder(source)
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    std::fs::rename(&next, &path).unwrap();
    store.reload().await.unwrap();
    assert_eq!(store.generation(), 2);
    drop(store);
    ARMED.store(false, Ordering::SeqCst);

    assert_eq!(
        UNWIPED.load(Ordering::SeqCst),
        0,
        "blocks freed with a token still in them"
    );
    drop((first, second));
}
