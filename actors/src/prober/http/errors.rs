//! Transport failures in Go's words: what a probe's output and events say when a request
//! fails, as the kubelet's Go client would have put it (`Get "<url>": dial tcp …: connect:
//! connection refused`, `unexpected EOF`, …).

use std::io;

use crate::gofmt::go_quote;

/// Go's `url.Error` text for a failed `client.Do`.
pub(crate) fn transport_error(url: &str, error: &str) -> String {
    format!("Get {}: {error}", go_quote(url))
}

/// A failed TLS handshake; a server answering in plain HTTP gets Go's message for it.
pub(super) fn tls_error_text(error: &io::Error) -> String {
    let plain_http = error.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()).is_some_and(|e| {
        matches!(e, rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType))
    });
    if plain_http { "http: server gave HTTP response to HTTPS client".to_owned() } else { go_io_text(error) }
}

/// An OS error as Go prints it: `connection refused`, not `Connection refused (os error 111)`.
pub(super) fn go_io_text(error: &io::Error) -> String {
    let text = error.to_string();
    let text = match text.rfind(" (os error ") {
        Some(i) if error.raw_os_error().is_some() => &text[..i],
        _ => text.as_str(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) if error.raw_os_error().is_some() => first.to_lowercase().chain(chars).collect(),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_like_go() {
        let refused = io::Error::from_raw_os_error(111);
        if refused.kind() == io::ErrorKind::ConnectionRefused {
            assert_eq!(go_io_text(&refused), "connection refused");
        }
        assert_eq!(go_io_text(&io::Error::other("Custom")), "Custom");
    }
}
