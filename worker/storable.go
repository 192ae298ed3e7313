package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxMessageBytes bounds the text of one error history entry or dead
// reason as stored. A longer message (a panic's stack of a deep recursion,
// a whole upstream response) is cut at a character boundary and says how
// much was cut: the job's row stays small, and the claim, which reads the
// row, stays fast.
const MaxMessageBytes = 16 << 10

// storableText makes s something PostgreSQL stores in a text or jsonb
// string: valid UTF-8 (invalid bytes become U+FFFD), no NUL (U+FFFD too;
// PostgreSQL's text cannot hold one), at most MaxMessageBytes. Error texts
// come from anywhere (an upload parser, a binary protocol, a panic's
// value), and one the server refuses must not stop a worker recording.
func storableText(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= MaxMessageBytes {
		return s
	}
	cut := MaxMessageBytes - 64 // room for the note
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(" … [cut by hopper: %d more bytes]", len(s)-cut)
}

// nulEscape is how JSON spells a NUL character, which jsonb refuses.
var nulEscape = []byte(`\u0000`)

// storableJSON makes a handler's result something jsonb stores: a string
// holding NUL (\u0000) has it replaced by U+FFFD, invalid UTF-8 likewise,
// and text that is not JSON at all is stored as one JSON string. A result
// needing none of this (nearly all) is returned as it is, after a scan.
func storableJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || (!bytes.Contains(raw, nulEscape) && utf8.Valid(raw)) && json.Valid(raw) {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		out, _ := json.Marshal(storableText(string(raw)))
		return out
	}
	out, err := json.Marshal(storableValue(v))
	if err != nil { // cannot happen for what Decode made; be safe anyway
		out, _ = json.Marshal(storableText(string(raw)))
	}
	return out
}

func storableValue(v any) any {
	switch x := v.(type) {
	case string:
		return storableString(x)
	case []any:
		for i := range x {
			x[i] = storableValue(x[i])
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[storableString(k)] = storableValue(e)
		}
		return out
	default:
		return v
	}
}

// storableString is storableText without the length bound: a result is
// the handler's data, not a message, and is never cut.
func storableString(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
