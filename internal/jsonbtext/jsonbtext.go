// Package jsonbtext measures a JSON document as PostgreSQL's jsonb prints
// it, the text the tables' size checks measure (octet_length(x::text)):
// a space after every ',' and ':', the last of duplicate keys only,
// strings escaped as PostgreSQL escapes them (not as Go does: '<', '>',
// '&' and U+2028 print raw), numbers as numeric prints them (1e+21 is 22
// digits, 1.50 keeps its scale). It also finds what jsonb refuses to
// hold: a NUL character (\u0000), a lone surrogate, invalid UTF-8, a
// number out of numeric's range. A Go check and the database's then
// agree on every value.
package jsonbtext

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotStorable is wrapped by Len's error for a document jsonb refuses.
var ErrNotStorable = errors.New("jsonb cannot hold it")

// numeric's range: at most this many digits before the decimal point
// (a weight of 32767 base-10000 digits) and after it (its display scale).
const (
	maxIntDigits = 131072
	maxScale     = 16383
)

// Len returns the length in bytes of raw as jsonb prints it. raw must be
// one valid JSON document (as json.Marshal returns); an error wraps
// ErrNotStorable when jsonb would refuse it.
func Len(raw []byte) (int, error) {
	p := parser{b: raw}
	p.space()
	n, err := p.value()
	if err != nil {
		return 0, err
	}
	p.space()
	if p.i != len(p.b) {
		return 0, fmt.Errorf("jsonbtext: text after the document at byte %d", p.i)
	}
	return n, nil
}

type parser struct {
	b []byte
	i int
}

func (p *parser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("jsonbtext: at byte %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *parser) value() (int, error) {
	if p.i >= len(p.b) {
		return 0, p.errorf("unexpected end")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		return quotedLen(s), err
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return 0, p.errorf("unexpected %q", c)
	}
}

func (p *parser) literal(word string) (int, error) {
	if p.i+len(word) > len(p.b) || string(p.b[p.i:p.i+len(word)]) != word {
		return 0, p.errorf("want %s", word)
	}
	p.i += len(word)
	return len(word), nil
}

// object: {"k": v, "k2": v2}; a key given twice keeps its last value.
func (p *parser) object() (int, error) {
	p.i++ // {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return 2, nil
	}
	members := map[string]int{} // key → its "key": value length
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return 0, p.errorf("want a key")
		}
		key, err := p.str()
		if err != nil {
			return 0, err
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return 0, p.errorf("want ':'")
		}
		p.i++
		p.space()
		v, err := p.value()
		if err != nil {
			return 0, err
		}
		members[key] = quotedLen(key) + 2 + v
		p.space()
		if p.i >= len(p.b) {
			return 0, p.errorf("unexpected end")
		}
		if p.b[p.i] == '}' {
			p.i++
			break
		}
		if p.b[p.i] != ',' {
			return 0, p.errorf("want ',' or '}'")
		}
		p.i++
	}
	n := 2 + 2*(len(members)-1)
	for _, m := range members {
		n += m
	}
	return n, nil
}

func (p *parser) array() (int, error) {
	p.i++ // [
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return 2, nil
	}
	n, count := 2, 0
	for {
		p.space()
		v, err := p.value()
		if err != nil {
			return 0, err
		}
		n += v
		count++
		p.space()
		if p.i >= len(p.b) {
			return 0, p.errorf("unexpected end")
		}
		if p.b[p.i] == ']' {
			p.i++
			break
		}
		if p.b[p.i] != ',' {
			return 0, p.errorf("want ',' or ']'")
		}
		p.i++
	}
	return n + 2*(count-1), nil
}

// str decodes a JSON string at p.i to its text.
func (p *parser) str() (string, error) {
	p.i++ // "
	var out []byte
	for {
		if p.i >= len(p.b) {
			return "", p.errorf("unterminated string")
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(out) {
				return "", fmt.Errorf("jsonbtext: a string is not valid UTF-8: %w", ErrNotStorable)
			}
			return string(out), nil
		case c == '\\':
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			out = utf8.AppendRune(out, r)
		default:
			out = append(out, c)
			p.i++
		}
	}
}

// escape decodes the escape at p.i (a backslash).
func (p *parser) escape() (rune, error) {
	if p.i+1 >= len(p.b) {
		return 0, p.errorf("unterminated escape")
	}
	c := p.b[p.i+1]
	p.i += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
	default:
		return 0, p.errorf("bad escape %q", c)
	}
	r, err := p.hex4()
	if err != nil {
		return 0, err
	}
	switch {
	case r == 0:
		return 0, fmt.Errorf("jsonbtext: a NUL character (\\u0000): %w", ErrNotStorable)
	case utf16.IsSurrogate(r) && r < 0xdc00 && p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u':
		save := p.i
		p.i += 2
		low, err := p.hex4()
		if err != nil {
			return 0, err
		}
		if pair := utf16.DecodeRune(r, low); pair != utf8.RuneError {
			return pair, nil
		}
		p.i = save
		return 0, fmt.Errorf("jsonbtext: a lone surrogate (\\u%04x): %w", r, ErrNotStorable)
	case utf16.IsSurrogate(r):
		return 0, fmt.Errorf("jsonbtext: a lone surrogate (\\u%04x): %w", r, ErrNotStorable)
	}
	return r, nil
}

func (p *parser) hex4() (rune, error) {
	if p.i+4 > len(p.b) {
		return 0, p.errorf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, p.errorf("bad \\u escape")
	}
	p.i += 4
	return rune(v), nil
}

// quotedLen is the length of s as jsonb prints a string (escape_json):
// quotes, backslash and the usual control characters as two-byte escapes,
// other control characters as \u00XX, everything else as it is.
func quotedLen(s string) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20:
			n += 6
		default:
			n++
		}
	}
	return n
}

// number measures a JSON number as numeric prints it: plain notation,
// the scale of the input kept (1.50 → 1.50, 1.5e-3 → 0.0015, 1e+2 →
// 100), zero never signed.
func (p *parser) number() (int, error) {
	start := p.i
	neg := false
	if p.b[p.i] == '-' {
		neg = true
		p.i++
	}
	digits := func() []byte {
		s := p.i
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
		}
		return p.b[s:p.i]
	}
	intDigits := digits()
	if len(intDigits) == 0 {
		return 0, p.errorf("bad number")
	}
	var fracDigits []byte
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if fracDigits = digits(); len(fracDigits) == 0 {
			return 0, p.errorf("bad number")
		}
	}
	exp := 0
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		es := p.i
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if len(digits()) == 0 {
			return 0, p.errorf("bad number")
		}
		e, err := strconv.Atoi(string(p.b[es:p.i]))
		if err != nil || e > 1<<24 || e < -(1<<24) {
			return 0, fmt.Errorf("jsonbtext: the number %s is out of numeric's range: %w", p.b[start:p.i], ErrNotStorable)
		}
		exp = e
	}
	all := make([]byte, 0, len(intDigits)+len(fracDigits))
	all = append(append(all, intDigits...), fracDigits...)
	point := len(intDigits) + exp // where the decimal point sits in all
	scale := max(0, len(all)-point)
	// The integer part: the digits before the point, zero-padded when the
	// point is past them, without leading zeros; "0" when none is left.
	intLen := 0
	if point > 0 {
		upto := min(point, len(all))
		lead := 0
		for lead < upto && all[lead] == '0' {
			lead++
		}
		if lead < upto {
			intLen = point - lead
		}
	}
	intLen = max(intLen, 1)
	nonzero := false
	for _, d := range all {
		nonzero = nonzero || d != '0'
	}
	if intLen > maxIntDigits || scale > maxScale {
		return 0, fmt.Errorf("jsonbtext: the number %s is out of numeric's range: %w", p.b[start:p.i], ErrNotStorable)
	}
	n := intLen
	if scale > 0 {
		n += 1 + scale
	}
	if neg && nonzero {
		n++
	}
	return n, nil
}

// Refused reports whether err is the server refusing a value for its
// data: a data exception (SQLSTATE class 22: a character or a number it
// cannot store, a value out of range) or a check violation (23514).
// Sending the same value again would fail the same way.
func Refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.CheckViolation || strings.HasPrefix(pgErr.Code, "22"))
}
