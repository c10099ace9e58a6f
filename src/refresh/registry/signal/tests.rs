use super::*;

fn pending(signal: &Signal) -> bool {
    let mut notified = pin!(signal.notified());
    notified
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready()
}

#[test]
fn a_read_answers_the_events_before_it_not_those_after() {
    let signal = Signal::default();
    signal.wake();
    signal.wake();
    // Before the read: two events, one wake-up left.
    let seen = signal.events();
    signal.settle(seen);
    assert!(!pending(&signal), "answered by the read");

    signal.wake();
    let seen = signal.events();
    signal.wake(); // after the read started
    signal.settle(seen);
    assert!(pending(&signal), "a later event keeps its wake-up");
    assert!(!pending(&signal));

    // A later event whose wake-up was already taken (by the read's own retries):
    // nothing to give back.
    let seen = signal.events();
    signal.wake();
    assert!(pending(&signal));
    signal.settle(seen);
    assert!(!pending(&signal));
}
