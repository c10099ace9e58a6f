//! OAuth 2.0 service tokens as a token source (feature `oauth2`): the client-credentials
//! grant and token exchange. (Being written.)
