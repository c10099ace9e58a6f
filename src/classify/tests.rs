use super::*;

#[test]
fn classifiers() {
    let res = |status: u16, grpc: Option<&'static str>| {
        let mut r = Response::builder().status(status);
        if let Some(g) = grpc {
            r = r.header("grpc-status", g);
        }
        r.body(()).unwrap()
    };
    assert!(Http401.is_unauthorized(&res(401, None)));
    assert!(!Http401.is_unauthorized(&res(403, None)));
    assert!(!Http401.is_unauthorized(&res(200, Some("16"))));
    assert!(GrpcUnauthenticated.is_unauthorized(&res(200, Some("16"))));
    assert!(GrpcUnauthenticated.is_unauthorized(&res(401, None)));
    assert!(!GrpcUnauthenticated.is_unauthorized(&res(200, Some("7"))));
    assert!(!GrpcUnauthenticated.is_unauthorized(&res(200, Some("0"))));
    assert!(!GrpcUnauthenticated.is_unauthorized(&res(200, Some("160"))));
}
