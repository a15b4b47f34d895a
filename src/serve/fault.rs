//! Host failures as a client sees them: a fixed sentence with a request id, never the cause,
//! whose text can name the store's folders and files; the cause goes to the server's log, with
//! its whole chain and the same id, so that an operator can find it from what a client reports.
//!
//! What this file does not do: decide which failures are the client's (those are answered
//! with their reason, as 4xx or JSON-RPC errors, where they happen).

use super::ids::uuid_v4;

/// Logs `error` with its causes under a new request id (a random UUID, as session ids are),
/// and returns what the client is told.
pub fn report(error: &(dyn std::error::Error + 'static)) -> String {
    let id = log(error);
    format!("the server failed to handle this request (request id {id}); its log has the cause")
}

/// Logs `error` with its causes under a new request id, and returns the id, for an answer that
/// says more than [`report`] of what did not happen.
pub fn log(error: &(dyn std::error::Error + 'static)) -> String {
    let id = uuid_v4();
    tracing::error!(request_id = %id, "{}", crate::error_chain(error));
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_no_cause_and_ids_differ() {
        let error = std::io::Error::other("cannot open /srv/store/packages/x/1.0.0/module.wasm");
        let first = report(&error);
        let second = report(&error);
        assert!(!first.contains("/srv"), "{first}");
        assert!(first.contains("request id "), "{first}");
        assert_ne!(first, second);
    }
}
