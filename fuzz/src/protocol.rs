//! The check of the guest-line codec: a guest's stdout, cut into lines as the call session
//! cuts it, each sorted by `parse_line` against an awaited id, and every result read the ways
//! the host reads one (`call_result`, `discover_result`, `tools_list_page` and the tool rules).

use hako::package::validate_tools;
use hako::protocol::{
    call_result, discover_result, parse_line, tools_list_page, Answer, Line, RequestId, ShownBlock,
};

/// The ids a host may await, chosen by an input's first byte.
fn awaited(choice: u8) -> Option<RequestId> {
    match choice % 4 {
        0 => None,
        1 => Some(RequestId::Num(1)),
        2 => Some(RequestId::Str("call-1".into())),
        _ => Some(RequestId::Num(i64::MAX)),
    }
}

/// One input: its first byte chooses the awaited id, the rest is the guest's stdout.
pub fn guest_lines(data: &[u8]) {
    let Some((&choice, stdout)) = data.split_first() else {
        return;
    };
    let expected = awaited(choice);
    for line in stdout.split(|&byte| byte == b'\n') {
        let mut line = line.to_vec();
        parse_line(&mut line, expected.as_ref(), |sorted| match sorted {
            Ok(Line::Notification) => {}
            Ok(Line::Answer(answer)) => {
                assert!(
                    expected.is_some(),
                    "an answer while no request is outstanding"
                );
                if let Answer::Result(result) = answer {
                    read_result(&result);
                }
            }
            Err(fault) => {
                let kind = fault.crash_kind();
                assert!(
                    ["not_jsonrpc", "unknown_id", "guest_request"].contains(&kind),
                    "{kind}"
                );
                assert!(!fault.to_string().is_empty());
            }
        });
    }
}

/// Reads a result as a `tools/call` answer, a `server/discover` answer and a `tools/list`
/// page. None of them may panic; a shown result keeps the promises of its blocks.
fn read_result(result: &simd_json::BorrowedValue<'_>) {
    match call_result(result) {
        Ok(shown) => {
            for block in &shown.content {
                match block {
                    ShownBlock::VolumeLink { path, .. } => {
                        for segment in path.split('/') {
                            assert!(
                                !matches!(segment, "" | "." | "..") && !segment.contains('\0'),
                                "a volume link leads to {path:?}"
                            );
                        }
                    }
                    ShownBlock::Image { mime_type, .. } => {
                        assert!(mime_type.starts_with("image/"), "{mime_type}");
                    }
                    _ => {}
                }
            }
            serde_json::to_value(&shown).expect("a shown result serializes");
        }
        Err(refused) => {
            let _ = refused.crash_kind();
            assert!(!refused.to_string().is_empty());
        }
    }
    let _ = discover_result(result);
    if let Ok((tools, _cursor)) = tools_list_page(result) {
        let _ = validate_tools(tools);
    }
}
