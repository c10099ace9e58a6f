use super::*;
use crate::test_support::DEADLINE;

#[test]
fn the_checks_thread_ends_as_soon_as_it_is_dropped() {
    let table = Arc::new(Mutex::new(Table::default()));
    // An hour between checks: the thread would outlive the test but for the drop.
    let health = start(Arc::downgrade(&table), Duration::from_secs(3600)).unwrap();
    let stop = health.stop.clone();
    // The thread holds its own handle on the flag while it runs.
    assert_eq!(Arc::strong_count(&stop), 3);
    drop(health);
    let deadline = std::time::Instant::now() + DEADLINE;
    while Arc::strong_count(&stop) > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the check's thread still runs after its handle was dropped"
        );
        std::thread::yield_now();
    }
}
