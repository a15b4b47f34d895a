//! A Subako ABI 1 package in Zig, for the bench corpus: an MCP server over stdio whose tools
//! parse JSON, hash, sort, and send HTTP through subako_http, the same tools as the Go package,
//! written with Zig's standard library alone (its JSON parser and writer, SHA-256, block sort)
//! and the WASI calls it binds.

const std = @import("std");
const mcp = @import("mcp.zig");
const Stringify = mcp.Stringify;
const Writer = mcp.Writer;
const stringField = mcp.stringField;

extern "subako_http" fn request(ptr: [*]const u8, len: i32) i32;
extern "subako_http" fn read_response(ptr: [*]u8, len: i32) i32;

/// The tools, as `tools/list` answers them.
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
    mcp.run(.{ .list = tools, .call = call });
}

/// Writes the value of tool `name` into `v`, or answers why it failed.
fn call(gpa: std.mem.Allocator, v: *Stringify, name: []const u8, args: std.json.ObjectMap) !?[]const u8 {
    if (std.mem.eql(u8, name, "inspect")) {
        const text = stringField(args, "json") orelse return "json is not a string";
        const doc = std.json.parseFromSliceLeaky(std.json.Value, gpa, text, .{}) catch
            return "json does not parse";
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
        const text = stringField(args, "text") orelse return "text is not a string";
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
        const text = stringField(args, "text") orelse return "text is not a string";
        try words(gpa, v, text);
    } else if (std.mem.eql(u8, name, "fetch")) {
        const url = stringField(args, "url") orelse return "url is not a string";
        const answer = fetch(gpa, url) catch |err| return @errorName(err);
        try v.print("{s}", .{answer});
    } else {
        return try std.fmt.allocPrint(gpa, "no tool named {s}", .{name});
    }
    return null;
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
