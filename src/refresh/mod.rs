//! Background refreshers owned by a [`TokenStore`](crate::TokenStore): a directory
//! watcher that reacts within milliseconds, and a timer that is the backstop when no event
//! comes. Both hold a weak handle and end with the store's last clone.

pub(crate) mod expiry;
pub(crate) mod schedule;
pub(crate) mod watch;
