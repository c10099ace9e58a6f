use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{GAUGE_PERIOD, Task};

/// A task of its own (not the process's) whose `publish` answers by call number, and
/// the count of its calls.
fn task(live: fn(usize) -> bool) -> (&'static Task, &'static AtomicUsize) {
    let calls: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let publish = Box::new(move || live(calls.fetch_add(1, Ordering::SeqCst)));
    (Box::leak(Box::new(Task::new(publish))), calls)
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Lets the paused clock run `periods` of the task (and a hair more).
async fn run_for(periods: u32) {
    tokio::time::sleep(GAUGE_PERIOD * periods + Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn one_task_publishes_each_period_while_stores_live() {
    let (task, calls) = task(|_| true);
    task.ensure_running();
    task.ensure_running();
    run_for(2).await;
    // At 0, 5 and 10 s, by one task: a second would double it.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert!(task.running.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn the_task_ends_with_the_last_store_and_the_next_store_starts_it() {
    let (task, calls) = task(|n| n >= 2);
    task.ensure_running();
    run_for(3).await;
    // The list, found empty, then looked at once more: then it ended.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(!task.running.load(Ordering::SeqCst));
    task.ensure_running();
    run_for(1).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert!(task.running.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_store_built_while_the_task_ends_takes_it_back_up() {
    // Empty at the first look, a store at the second.
    let (task, calls) = task(|n| n != 0);
    task.ensure_running();
    run_for(2).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert!(task.running.load(Ordering::SeqCst));
}

#[test]
fn a_runtime_shut_down_under_the_task_lets_the_next_runtime_start_it() {
    let (task, calls) = task(|_| true);
    let first = paused_runtime();
    first.block_on(async {
        task.ensure_running();
        run_for(0).await;
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    drop(first);
    assert!(!task.running.load(Ordering::SeqCst));

    // Spawned and dropped before its first poll.
    let second = paused_runtime();
    let entered = second.enter();
    task.ensure_running();
    drop(entered);
    drop(second);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(!task.running.load(Ordering::SeqCst));

    paused_runtime().block_on(async {
        task.ensure_running();
        run_for(0).await;
    });
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
