//! A Subako ABI 1 package in Zig, for the bench corpus: an MCP server over stdio whose tools
//! parse JSON, hash, sort, and send HTTP through subako_http, the same tools as the Go package,
//! written with Zig's standard library alone (its JSON parser and writer, SHA-256, block sort)
//! and the WASI calls it binds.

const std = @import("std");
const wasi = std.os.wasi;
const Stringify = std.json.Stringify;
const Writer = std.Io.Writer;

const protocol = "2026-07-28";

extern "subako_http" fn request(ptr: [*]const u8, len: i32) i32;
extern "subako_http" fn read_response(ptr: [*]u8, len: i32) i32;

/// The tools, as `tools/list` answers them (one line: a newline would end the answer).
const tools = "[" ++
    \\{"name":"inspect","description":"Parse a JSON document and count what it holds.",
++
    \\"inputSchema":{"type":"object","properties":{"json":{"type":"string"}},"required":["json"]}},
++
    \\{"name":"digest","description":"SHA-256 of a text, hashed again `rounds` times.",
++
    \\"inputSchema":{"type":"object","properties":{"text":{"type":"string"},"rounds":{"type":"integer"}},"required":["text"]}},
++
    \\{"name":"words","description":"The words of a text, sorted by count then name.",
++
    \\"inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}},
++
    \\{"name":"fetch","description":"GET a URL through the host and tell its status and length.",
++
    \\"inputSchema":{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}}
++ "]";

pub fn main() void {
    var line: std.ArrayList(u8) = .empty;
    var chunk: [64 * 1024]u8 = undefined;
    while (true) {
        const n = readStdin(&chunk);
        var rest = chunk[0..n];
        while (std.mem.indexOfScalar(u8, rest, '\n')) |end| {
            line.appendSlice(std.heap.wasm_allocator, rest[0..end]) catch return;
            serve(line.items);
            line.clearRetainingCapacity();
            rest = rest[end + 1 ..];
        }
        line.appendSlice(std.heap.wasm_allocator, rest) catch return;
        if (n == 0) {
            serve(line.items);
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
fn serve(line: []const u8) void {
    if (std.mem.trim(u8, line, " \t\r").len == 0) return;
    var arena = std.heap.ArenaAllocator.init(std.heap.wasm_allocator);
    defer arena.deinit();
    const answer = handle(arena.allocator(), line) catch return orelse return;
    writeStdout(answer);
    writeStdout("\n");
}

fn handle(gpa: std.mem.Allocator, line: []const u8) !?[]const u8 {
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
        try s.print("{{\"tools\":{s}}}", .{tools});
    } else if (std.mem.eql(u8, method, "tools/call")) {
        const params = objectField(parsed.object, "params");
        const name = if (params) |p| stringField(p, "name") orelse "" else "";
        const arguments = if (params) |p| objectField(p, "arguments") else null;
        try s.objectField("result");
        try call(gpa, &s, name, arguments);
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

fn objectField(object: std.json.ObjectMap, name: []const u8) ?std.json.ObjectMap {
    const found = object.get(name) orelse return null;
    return if (found == .object) found.object else null;
}

fn stringField(object: std.json.ObjectMap, name: []const u8) ?[]const u8 {
    const found = object.get(name) orelse return null;
    return if (found == .string) found.string else null;
}

/// Writes a tool's result: its value as text and as structured content, or an error.
fn call(gpa: std.mem.Allocator, s: *Stringify, name: []const u8, arguments: ?std.json.ObjectMap) !void {
    const args = arguments orelse return failed(s, "the arguments are not an object");
    var value: Writer.Allocating = .init(gpa);
    var v: Stringify = .{ .writer = &value.writer };
    if (std.mem.eql(u8, name, "inspect")) {
        const text = stringField(args, "json") orelse return failed(s, "json is not a string");
        const doc = std.json.parseFromSliceLeaky(std.json.Value, gpa, text, .{}) catch
            return failed(s, "json does not parse");
        var counts = Counts{};
        const depth = counts.walk(doc, 1);
        try v.beginObject();
        try v.objectField("counts");
        try v.beginObject();
        inline for (.{ "arrays", "literals", "numbers", "objects", "strings" }) |field| {
            if (@field(counts, field) > 0) {
                try v.objectField(field);
                try v.write(@field(counts, field));
            }
        }
        try v.endObject();
        try v.objectField("depth");
        try v.write(depth);
        try v.endObject();
    } else if (std.mem.eql(u8, name, "digest")) {
        const text = stringField(args, "text") orelse return failed(s, "text is not a string");
        var rounds: i64 = 0;
        if (args.get("rounds")) |r| {
            if (r == .integer) rounds = r.integer;
        }
        var sum: [32]u8 = undefined;
        std.crypto.hash.sha2.Sha256.hash(text, &sum, .{});
        var i: i64 = 0;
        while (i < rounds) : (i += 1) {
            const last = sum;
            std.crypto.hash.sha2.Sha256.hash(&last, &sum, .{});
        }
        try v.beginObject();
        try v.objectField("sha256");
        try v.write(&std.fmt.bytesToHex(sum, .lower));
        try v.endObject();
    } else if (std.mem.eql(u8, name, "words")) {
        const text = stringField(args, "text") orelse return failed(s, "text is not a string");
        try words(gpa, &v, text);
    } else if (std.mem.eql(u8, name, "fetch")) {
        const url = stringField(args, "url") orelse return failed(s, "url is not a string");
        const answer = fetch(gpa, url) catch |err| return failed(s, @errorName(err));
        try v.print("{s}", .{answer});
    } else {
        return failed(s, try std.fmt.allocPrint(gpa, "no tool named {s}", .{name}));
    }
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

/// What a JSON document holds, by kind.
const Counts = struct {
    arrays: u64 = 0,
    literals: u64 = 0,
    numbers: u64 = 0,
    objects: u64 = 0,
    strings: u64 = 0,

    /// Counts `value` and what it holds; answers its depth.
    fn walk(self: *Counts, value: std.json.Value, depth: u64) u64 {
        var deepest = depth;
        switch (value) {
            .object => |object| {
                self.objects += 1;
                for (object.values()) |item| deepest = @max(deepest, self.walk(item, depth + 1));
            },
            .array => |array| {
                self.arrays += 1;
                for (array.items) |item| deepest = @max(deepest, self.walk(item, depth + 1));
            },
            .string => self.strings += 1,
            .integer, .float, .number_string => self.numbers += 1,
            .null, .bool => self.literals += 1,
        }
        return deepest;
    }
};

const Entry = struct {
    word: []const u8,
    count: u64,

    fn before(_: void, a: Entry, b: Entry) bool {
        if (a.count != b.count) return a.count > b.count;
        return std.mem.lessThan(u8, a.word, b.word);
    }
};

/// The words of `text` (letters and digits, lowercased; bytes past ASCII count as letters),
/// with their counts, most frequent first.
fn words(gpa: std.mem.Allocator, v: *Stringify, text: []const u8) !void {
    const lower = try std.ascii.allocLowerString(gpa, text);
    var seen: std.StringArrayHashMapUnmanaged(u64) = .empty;
    var start: ?usize = null;
    for (lower, 0..) |byte, at| {
        const inside = std.ascii.isAlphanumeric(byte) or byte > 127;
        if (inside and start == null) start = at;
        if (!inside or at + 1 == lower.len) {
            if (start) |from| {
                const to = if (inside) at + 1 else at;
                const entry = try seen.getOrPut(gpa, lower[from..to]);
                if (!entry.found_existing) entry.value_ptr.* = 0;
                entry.value_ptr.* += 1;
                start = null;
            }
        }
    }
    const entries = try gpa.alloc(Entry, seen.count());
    for (seen.keys(), seen.values(), entries) |word, count, *entry| {
        entry.* = .{ .word = word, .count = count };
    }
    std.mem.sort(Entry, entries, {}, Entry.before);
    try v.beginObject();
    try v.objectField("distinct");
    try v.write(entries.len);
    try v.objectField("words");
    try v.write(entries);
    try v.endObject();
}

/// Sends a GET of `url` through subako_http; answers the host's JSON answer.
fn fetch(gpa: std.mem.Allocator, url: []const u8) ![]const u8 {
    var body: Writer.Allocating = .init(gpa);
    var s: Stringify = .{ .writer = &body.writer };
    try s.beginObject();
    try s.objectField("url");
    try s.write(url);
    try s.endObject();
    const sent = body.written();
    const length = request(sent.ptr, @intCast(sent.len));
    if (length < 0) return error.RequestRefused;
    const answer = try gpa.alloc(u8, @intCast(length));
    if (read_response(answer.ptr, length) != 0) return error.ReadResponseRefused;
    return answer;
}
