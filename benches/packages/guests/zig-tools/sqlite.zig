//! A Subako ABI 1 package in Zig and C, for the bench corpus: SQLite (the C amalgamation,
//! built with the package) behind one tool, `query`, that runs SQL on a fresh in-memory
//! database and answers the rows of its last statement that returns any. A large C library
//! in one module: about 1,700 functions.

const std = @import("std");
const mcp = @import("mcp.zig");
const Stringify = mcp.Stringify;
const Writer = mcp.Writer;

/// The most rows an answer holds; it says when there were more.
const max_rows = 1000;

const tools = "[" ++
    \\{"name":"query","description":"Run SQL statements on a fresh in-memory SQLite database and answer the rows of the last one that returns rows.",
++
    \\"inputSchema":{"type":"object","properties":{"sql":{"type":"string"}},"required":["sql"]}}
++ "]";

pub fn main() void {
    mcp.run(.{ .list = tools, .call = call });
}

const Db = opaque {};
const Stmt = opaque {};

const SQLITE_OK = 0;
const SQLITE_ROW = 100;
const SQLITE_DONE = 101;
const SQLITE_OPEN_READWRITE = 0x02;
const SQLITE_OPEN_CREATE = 0x04;
const SQLITE_INTEGER = 1;
const SQLITE_FLOAT = 2;
const SQLITE_TEXT = 3;
const SQLITE_BLOB = 4;

extern fn sqlite3_open_v2(name: [*:0]const u8, db: *?*Db, flags: c_int, vfs: ?[*:0]const u8) c_int;
extern fn sqlite3_close(db: ?*Db) c_int;
extern fn sqlite3_errmsg(db: ?*Db) [*:0]const u8;
extern fn sqlite3_libversion() [*:0]const u8;
extern fn sqlite3_total_changes(db: *Db) c_int;
extern fn sqlite3_prepare_v2(db: *Db, sql: [*]const u8, len: c_int, stmt: *?*Stmt, tail: *?[*]const u8) c_int;
extern fn sqlite3_step(stmt: *Stmt) c_int;
extern fn sqlite3_finalize(stmt: ?*Stmt) c_int;
extern fn sqlite3_column_count(stmt: *Stmt) c_int;
extern fn sqlite3_column_name(stmt: *Stmt, column: c_int) ?[*:0]const u8;
extern fn sqlite3_column_type(stmt: *Stmt, column: c_int) c_int;
extern fn sqlite3_column_int64(stmt: *Stmt, column: c_int) i64;
extern fn sqlite3_column_double(stmt: *Stmt, column: c_int) f64;
extern fn sqlite3_column_text(stmt: *Stmt, column: c_int) ?[*]const u8;
extern fn sqlite3_column_blob(stmt: *Stmt, column: c_int) ?[*]const u8;
extern fn sqlite3_column_bytes(stmt: *Stmt, column: c_int) c_int;

/// Writes the value of tool `name` into `v`, or answers why it failed.
fn call(gpa: std.mem.Allocator, v: *Stringify, name: []const u8, args: std.json.ObjectMap) !?[]const u8 {
    if (!std.mem.eql(u8, name, "query")) {
        return try std.fmt.allocPrint(gpa, "no tool named {s}", .{name});
    }
    const sql = mcp.stringField(args, "sql") orelse return "sql is not a string";
    if (sql.len > std.math.maxInt(c_int)) return "sql is too long";
    var db: ?*Db = null;
    defer _ = sqlite3_close(db);
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, null) != SQLITE_OK) {
        return try failure(gpa, "the database does not open", db);
    }
    var statements: u64 = 0;
    // The last statement's result that returned rows: its columns and rows as JSON.
    var result: ?Result = null;
    var rest = sql;
    while (rest.len > 0) {
        var stmt: ?*Stmt = null;
        var tail: ?[*]const u8 = null;
        if (sqlite3_prepare_v2(db.?, rest.ptr, @intCast(rest.len), &stmt, &tail) != SQLITE_OK) {
            return try failure(gpa, "a statement does not compile", db);
        }
        const used = if (tail) |t| @intFromPtr(t) - @intFromPtr(rest.ptr) else rest.len;
        rest = rest[used..];
        const statement = stmt orelse {
            if (used == 0) break;
            continue; // only a comment or white space
        };
        statements += 1;
        const ran = run(gpa, statement);
        // Finalizing answers the error a step met, and leaves its message for errmsg.
        const finalized = sqlite3_finalize(statement);
        const rows = ran catch |err| switch (err) {
            error.StepFailed => return try failure(gpa, "a statement failed", db),
            else => return err,
        };
        if (finalized != SQLITE_OK) return try failure(gpa, "a statement failed", db);
        if (rows) |found| result = found;
    }
    try v.beginObject();
    try v.objectField("statements");
    try v.write(statements);
    try v.objectField("changes");
    try v.write(sqlite3_total_changes(db.?));
    if (result) |found| {
        try v.objectField("columns");
        try v.print("{s}", .{found.columns});
        try v.objectField("rows");
        try v.print("{s}", .{found.rows});
        try v.objectField("truncated");
        try v.write(found.truncated);
    }
    try v.objectField("sqlite");
    try v.write(std.mem.span(sqlite3_libversion()));
    try v.endObject();
    return null;
}

/// What a statement that returned rows answered.
const Result = struct {
    columns: []const u8,
    rows: []const u8,
    truncated: bool,
};

/// Steps `stmt` to its end; its rows if it has columns (the first `max_rows` of them).
fn run(gpa: std.mem.Allocator, stmt: *Stmt) !?Result {
    const count = sqlite3_column_count(stmt);
    var columns: Writer.Allocating = .init(gpa);
    var c: Stringify = .{ .writer = &columns.writer };
    try c.beginArray();
    var column: c_int = 0;
    while (column < count) : (column += 1) {
        try c.write(if (sqlite3_column_name(stmt, column)) |text| std.mem.span(text) else "");
    }
    try c.endArray();
    var rows: Writer.Allocating = .init(gpa);
    var r: Stringify = .{ .writer = &rows.writer };
    try r.beginArray();
    var seen: u64 = 0;
    while (true) {
        const step = sqlite3_step(stmt);
        if (step == SQLITE_DONE) break;
        if (step != SQLITE_ROW) return error.StepFailed;
        seen += 1;
        if (seen > max_rows) continue;
        try r.beginArray();
        column = 0;
        while (column < count) : (column += 1) try value(&r, stmt, column);
        try r.endArray();
    }
    try r.endArray();
    if (count == 0) return null;
    return .{ .columns = columns.written(), .rows = rows.written(), .truncated = seen > max_rows };
}

/// One column of the current row as JSON: integers and reals as numbers (a real that is not
/// finite as null), text as a string (null if it is not UTF-8), a blob as its hex digits.
fn value(r: *Stringify, stmt: *Stmt, column: c_int) !void {
    const len: usize = @intCast(sqlite3_column_bytes(stmt, column));
    switch (sqlite3_column_type(stmt, column)) {
        SQLITE_INTEGER => try r.write(sqlite3_column_int64(stmt, column)),
        SQLITE_FLOAT => {
            const real = sqlite3_column_double(stmt, column);
            if (std.math.isFinite(real)) try r.write(real) else try r.write(null);
        },
        SQLITE_TEXT => {
            const text = (sqlite3_column_text(stmt, column) orelse "".ptr)[0..len];
            if (std.unicode.utf8ValidateSlice(text)) try r.write(text) else try r.write(null);
        },
        SQLITE_BLOB => {
            const blob = (sqlite3_column_blob(stmt, column) orelse "".ptr)[0..len];
            try r.beginWriteRaw();
            try r.writer.writeByte('"');
            for (blob) |byte| try r.writer.print("{x:0>2}", .{byte});
            try r.writer.writeByte('"');
            r.endWriteRaw();
        },
        else => try r.write(null),
    }
}

/// `what`, and what SQLite said of it.
fn failure(gpa: std.mem.Allocator, what: []const u8, db: ?*Db) ![]const u8 {
    return std.fmt.allocPrint(gpa, "{s}: {s}", .{ what, std.mem.span(sqlite3_errmsg(db)) });
}
