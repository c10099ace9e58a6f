use super::*;

/// Output goes into room made before each read, doubled from 8 KiB whenever it is full and
/// never grown by the `Vec` itself (which would free an unwiped copy); exactly `max` bytes
/// are an output, a byte more are not.
#[tokio::test]
async fn output_is_read_into_room_made_before_each_read_up_to_the_cap() {
    let output = vec![7u8; 20_000];
    let read = read_capped(&output[..], 20_000).await.unwrap().unwrap();
    assert_eq!(*read, output);
    assert_eq!(read.capacity(), 32 * 1024);
    assert!(read_capped(&output[..], 19_999).await.unwrap().is_none());
}
