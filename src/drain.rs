//! Reading and dropping the body of a refused response before its request is sent again.
//!
//! An HTTP/1 connection goes back to the client's pool only once the response on it has
//! been read to the end. A 401 usually carries a short body (a Kubernetes `Status`, a
//! proxy's page): reading it first lets the retry reuse the connection instead of opening
//! a new one. A body that is larger, or slower, than the limits is dropped as it is (its
//! connection is closed).

use std::time::Duration;

use http_body::Body;
use http_body_util::BodyExt;

/// At most this many bytes of a refused response's body are read before the retry.
pub(crate) const DRAIN_LIMIT: usize = 8 * 1024;

/// At most this long is spent reading a refused response's body before the retry.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_millis(100);

/// What became of a drained body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Read to its end: the connection can be reused.
    Whole,
    /// Larger than the limit (announced or read): dropped unread past it.
    TooLarge,
    /// Not finished within the time limit, or failed: dropped.
    Abandoned,
}

/// Reads `body` to its end and drops what it read, within [`DRAIN_LIMIT`] and
/// [`DRAIN_TIMEOUT`].
pub(crate) async fn drain<B: Body>(body: B) -> Drained {
    if body.size_hint().lower() > DRAIN_LIMIT as u64 {
        return Drained::TooLarge;
    }
    tokio::time::timeout(DRAIN_TIMEOUT, read_to_end(body))
        .await
        .unwrap_or(Drained::Abandoned)
}

async fn read_to_end<B: Body>(body: B) -> Drained {
    let mut body = std::pin::pin!(body);
    let mut read = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Drained::Abandoned;
        };
        if let Some(data) = frame.data_ref() {
            read += bytes::Buf::remaining(data);
            if read > DRAIN_LIMIT {
                return Drained::TooLarge;
            }
        }
    }
    Drained::Whole
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body::Frame;
    use http_body_util::{Full, StreamBody};

    fn stream(chunks: usize, size: usize) -> impl Body<Data = Bytes, Error = std::io::Error> {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = (0..chunks)
            .map(|_| Ok(Frame::data(Bytes::from(vec![b'x'; size]))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn a_short_body_is_read_to_its_end() {
        assert_eq!(
            drain(Full::new(Bytes::from_static(b"Unauthorized"))).await,
            Drained::Whole
        );
        assert_eq!(
            drain(stream(8, 1024)).await,
            Drained::Whole,
            "exactly the limit"
        );
    }

    #[tokio::test]
    async fn a_long_body_is_given_up_on_past_the_limit() {
        assert_eq!(drain(stream(9, 1024)).await, Drained::TooLarge);
        // Announced larger: not read at all.
        let big = Full::new(Bytes::from(vec![b'x'; DRAIN_LIMIT + 1]));
        assert_eq!(drain(big).await, Drained::TooLarge);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_does_not_end_is_given_up_on_in_time() {
        let pending = StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, std::io::Error>,
        >());
        assert_eq!(drain(pending).await, Drained::Abandoned);
    }

    #[tokio::test]
    async fn a_failing_body_is_abandoned() {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> =
            vec![Err(std::io::Error::other("reset"))];
        let failing = StreamBody::new(futures_util::stream::iter(frames));
        assert_eq!(drain(failing).await, Drained::Abandoned);
    }
}
