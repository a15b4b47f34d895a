// A Subako ABI 1 package in standard Go (GOOS=wasip1 GOARCH=wasm), for the bench corpus:
// an MCP server over stdio whose tools parse JSON, hash, sort, and send HTTP through
// subako_http. It uses the standard library alone, as a package from the Go template does, so
// its module has the shape the Go toolchain gives every package: thousands of functions and
// data segments, and a large function table.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"unsafe"
)

//go:wasmimport subako_http request
func httpRequest(ptr unsafe.Pointer, length int32) int32

//go:wasmimport subako_http read_response
func httpReadResponse(ptr unsafe.Pointer, length int32) int32

const protocol = "2026-07-28"

type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"params"`
}

type tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
}

func schema(properties map[string]any, required ...string) map[string]any {
	return map[string]any{"type": "object", "properties": properties, "required": required}
}

var tools = []tool{
	{"inspect", "Parse a JSON document and count what it holds.",
		schema(map[string]any{"json": map[string]any{"type": "string"}}, "json")},
	{"digest", "SHA-256 of a text, hashed again `rounds` times.",
		schema(map[string]any{"text": map[string]any{"type": "string"},
			"rounds": map[string]any{"type": "integer"}}, "text")},
	{"words", "The words of a text, sorted by count then name.",
		schema(map[string]any{"text": map[string]any{"type": "string"}}, "text")},
	{"fetch", "GET a URL through the host and tell its status and length.",
		schema(map[string]any{"url": map[string]any{"type": "string"}}, "url")},
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 64*1024)
	out := bufio.NewWriter(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			if answer := handle(line); answer != nil {
				out.Write(answer)
				out.WriteByte('\n')
				out.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

func handle(line []byte) []byte {
	var req request
	if err := json.Unmarshal(line, &req); err != nil || len(req.ID) == 0 || string(req.ID) == "null" {
		return nil
	}
	var result any
	switch req.Method {
	case "server/discover":
		result = map[string]any{"supportedVersions": []string{protocol},
			"capabilities": map[string]any{"tools": map[string]any{}}}
	case "tools/list":
		result = map[string]any{"tools": tools}
	case "tools/call":
		result = call(req.Params.Name, req.Params.Arguments)
	default:
		answer, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID,
			"error": map[string]any{"code": -32601, "message": "no method " + req.Method}})
		return answer
	}
	answer, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
	return answer
}

func failed(message string) map[string]any {
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": message}},
		"isError": true}
}

func done(value any) map[string]any {
	text, _ := json.Marshal(value)
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": string(text)}},
		"structuredContent": value}
}

func call(name string, raw json.RawMessage) map[string]any {
	var args struct {
		JSON   string `json:"json"`
		Text   string `json:"text"`
		Rounds int    `json:"rounds"`
		URL    string `json:"url"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return failed("the arguments are not an object of the tool's fields: " + err.Error())
	}
	switch name {
	case "inspect":
		var doc any
		if err := json.Unmarshal([]byte(args.JSON), &doc); err != nil {
			return failed("json does not parse: " + err.Error())
		}
		counts := map[string]int{}
		depth := count(doc, 1, counts)
		return done(map[string]any{"counts": counts, "depth": depth})
	case "digest":
		sum := sha256.Sum256([]byte(args.Text))
		for i := 0; i < args.Rounds; i++ {
			sum = sha256.Sum256(sum[:])
		}
		return done(map[string]any{"sha256": hex.EncodeToString(sum[:])})
	case "words":
		seen := map[string]int{}
		for _, word := range strings.FieldsFunc(strings.ToLower(args.Text), func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127)
		}) {
			seen[word]++
		}
		type entry struct {
			Word  string `json:"word"`
			Count int    `json:"count"`
		}
		words := make([]entry, 0, len(seen))
		for word, n := range seen {
			words = append(words, entry{word, n})
		}
		sort.Slice(words, func(i, j int) bool {
			if words[i].Count != words[j].Count {
				return words[i].Count > words[j].Count
			}
			return words[i].Word < words[j].Word
		})
		return done(map[string]any{"distinct": len(words), "words": words})
	case "fetch":
		answer, err := fetch(map[string]any{"url": args.URL})
		if err != nil {
			return failed(err.Error())
		}
		return done(answer)
	}
	return failed("no tool named " + name)
}

// count adds what value holds to counts and answers its depth.
func count(value any, depth int, counts map[string]int) int {
	deepest := depth
	switch v := value.(type) {
	case map[string]any:
		counts["objects"]++
		keys := make([]string, 0, len(v))
		for key := range v {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			deepest = max(deepest, count(v[key], depth+1, counts))
		}
	case []any:
		counts["arrays"]++
		for _, item := range v {
			deepest = max(deepest, count(item, depth+1, counts))
		}
	case string:
		counts["strings"]++
	case float64:
		counts["numbers"]++
	default:
		counts["literals"]++
	}
	return deepest
}

// fetch sends request through subako_http and answers the host's JSON answer.
func fetch(request map[string]any) (map[string]any, error) {
	body, _ := json.Marshal(request)
	length := httpRequest(unsafe.Pointer(&body[0]), int32(len(body)))
	if length < 0 {
		return nil, fmt.Errorf("subako_http.request answered %d", length)
	}
	answer := make([]byte, length)
	var at unsafe.Pointer
	if length > 0 {
		at = unsafe.Pointer(&answer[0])
	}
	if code := httpReadResponse(at, length); code != 0 {
		return nil, fmt.Errorf("subako_http.read_response answered %d", code)
	}
	var decoded map[string]any
	if err := json.Unmarshal(answer, &decoded); err != nil {
		return nil, err
	}
	return decoded, nil
}
