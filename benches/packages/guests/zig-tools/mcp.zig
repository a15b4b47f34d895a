//! The MCP server over stdio that the Zig packages of the bench corpus share (Subako ABI 1):
//! one JSON-RPC request a line on stdin, one answer a line on stdout, `server/discover`,
//! `tools/list` and `tools/call`, each request with an arena of its own. A package gives its
//! tools' list and the function that calls one ([`Tools`]).

const std = @import("std");
const wasi = std.os.wasi;
pub const Stringify = std.json.Stringify;
pub const Writer = std.Io.Writer;

const protocol = "2026-07-28";

/// A package's tools: their list as `tools/list` answers it (one line: a newline would end
/// the answer), and the call of one, which writes the tool's value into its `Stringify` and
/// answers null, or answers why the call failed (the value is then not used).
pub const Tools = struct {
    list: []const u8,
    call: *const fn (std.mem.Allocator, *Stringify, []const u8, std.json.ObjectMap) anyerror!?[]const u8,
};

/// Serves `tools` until stdin ends.
pub fn run(tools: Tools) void {
    var line: std.ArrayList(u8) = .empty;
    var chunk: [64 * 1024]u8 = undefined;
    while (true) {
        const n = readStdin(&chunk);
        var rest = chunk[0..n];
        while (std.mem.indexOfScalar(u8, rest, '\n')) |end| {
            line.appendSlice(std.heap.wasm_allocator, rest[0..end]) catch return;
            serve(tools, line.items);
            line.clearRetainingCapacity();
            rest = rest[end + 1 ..];
        }
        line.appendSlice(std.heap.wasm_allocator, rest) catch return;
        if (n == 0) {
            serve(tools, line.items);
            return;
        }
    }
}

/// Up to `buffer.len` bytes of stdin; 0 at its end (or on an error).
fn readStdin(buffer: []u8) usize {
    const iov = [_]wasi.iovec_t{.{ .base = buffer.ptr, .len = buffer.len }};
    var n: usize = 0;
    if (wasi.fd_read(0, &iov, 1, &n) != .SUCCESS) return 0;
    return n;
}

fn writeStdout(bytes: []const u8) void {
    var rest = bytes;
    while (rest.len > 0) {
        const iov = [_]wasi.ciovec_t{.{ .base = rest.ptr, .len = rest.len }};
        var n: usize = 0;
        if (wasi.fd_write(1, &iov, 1, &n) != .SUCCESS or n == 0) return;
        rest = rest[n..];
    }
}

/// Answers one request line, if it is a request with an id; each with an arena of its own.
fn serve(tools: Tools, line: []const u8) void {
    if (std.mem.trim(u8, line, " \t\r").len == 0) return;
    var arena = std.heap.ArenaAllocator.init(std.heap.wasm_allocator);
    defer arena.deinit();
    const answer = handle(tools, arena.allocator(), line) catch return orelse return;
    writeStdout(answer);
    writeStdout("\n");
}

fn handle(tools: Tools, gpa: std.mem.Allocator, line: []const u8) !?[]const u8 {
    const parsed = std.json.parseFromSliceLeaky(std.json.Value, gpa, line, .{}) catch return null;
    if (parsed != .object) return null;
    const id = parsed.object.get("id") orelse return null;
    if (id == .null) return null;
    const method = stringField(parsed.object, "method") orelse "";
    var out: Writer.Allocating = .init(gpa);
    var s: Stringify = .{ .writer = &out.writer };
    try s.beginObject();
    try s.objectField("jsonrpc");
    try s.write("2.0");
    try s.objectField("id");
    try s.write(id);
    if (std.mem.eql(u8, method, "server/discover")) {
        try s.objectField("result");
        try s.print("{{\"supportedVersions\":[\"{s}\"],\"capabilities\":{{\"tools\":{{}}}}}}", .{protocol});
    } else if (std.mem.eql(u8, method, "tools/list")) {
        try s.objectField("result");
        try s.print("{{\"tools\":{s}}}", .{tools.list});
    } else if (std.mem.eql(u8, method, "tools/call")) {
        const params = objectField(parsed.object, "params");
        const name = if (params) |p| stringField(p, "name") orelse "" else "";
        const arguments = if (params) |p| objectField(p, "arguments") else null;
        try s.objectField("result");
        try call(tools, gpa, &s, name, arguments);
    } else {
        try s.objectField("error");
        try s.beginObject();
        try s.objectField("code");
        try s.write(-32601);
        try s.objectField("message");
        try s.write(try std.fmt.allocPrint(gpa, "no method {s}", .{method}));
        try s.endObject();
    }
    try s.endObject();
    return out.written();
}

pub fn objectField(object: std.json.ObjectMap, name: []const u8) ?std.json.ObjectMap {
    const found = object.get(name) orelse return null;
    return if (found == .object) found.object else null;
}

pub fn stringField(object: std.json.ObjectMap, name: []const u8) ?[]const u8 {
    const found = object.get(name) orelse return null;
    return if (found == .string) found.string else null;
}

/// Writes a tool's result: its value as text and as structured content, or an error.
fn call(tools: Tools, gpa: std.mem.Allocator, s: *Stringify, name: []const u8, arguments: ?std.json.ObjectMap) !void {
    const args = arguments orelse return failed(s, "the arguments are not an object");
    var value: Writer.Allocating = .init(gpa);
    var v: Stringify = .{ .writer = &value.writer };
    if (try tools.call(gpa, &v, name, args)) |message| return failed(s, message);
    try s.beginObject();
    try textContent(s, value.written());
    try s.objectField("structuredContent");
    try s.print("{s}", .{value.written()});
    try s.endObject();
}

fn failed(s: *Stringify, message: []const u8) !void {
    try s.beginObject();
    try textContent(s, message);
    try s.objectField("isError");
    try s.write(true);
    try s.endObject();
}

/// A result's `content` field: one text block.
fn textContent(s: *Stringify, text: []const u8) !void {
    try s.objectField("content");
    try s.beginArray();
    try s.beginObject();
    try s.objectField("type");
    try s.write("text");
    try s.objectField("text");
    try s.write(text);
    try s.endObject();
    try s.endArray();
}
