package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when goroutines outlive its tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAPI: every exported declaration has one line, without parameter
// names, a type's lines together; unexported ones have none.
func TestAPI(t *testing.T) {
	const src = `package p

import "time"

const Max = 3

type State string

const StateA State = "a"

var ErrX error

type Config struct {
	Timeout time.Duration ` + "`json:\"timeout\"`" + `
	hidden  int
	Embedded
}

type Embedded struct{ N int }

func (c *Config) Do(ctx int, names ...string) (int, error) { return 0, nil }
func (c Config) unexported()                                {}

type Kind[T any] struct{}

func (k *Kind[T]) Enqueue(v T) error { return nil }

func New[T any](name string) *Kind[T] { return nil }

type DBTX interface {
	Exec(sql string) error
	Other
}

type Other interface{ Close() }

type Option = func(*Config)

type Number interface{ ~int | ~int64 }

func unexported() {}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{Importer: importer.Default()}).Check("example.com/p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `type Config struct
field Config.Timeout time.Duration "json:\"timeout\""
embed Config.Embedded Embedded
method (*Config) Do(int, ...string) (int, error)
type DBTX interface
embed DBTX.Other
method (DBTX) Exec(string) error
type Embedded struct
field Embedded.N int
var ErrX error
type Kind[T any] struct
method (*Kind[T]) Enqueue(T) error
const Max untyped int = 3
func New[T any](string) *Kind[T]
type Number interface{~int | ~int64}
type Option = func(*Config)
type Other interface
method (Other) Close()
type State string
const StateA State = "a"`
	if got := strings.Join(API(pkg), "\n"); got != want {
		t.Errorf("got\n%s\n\nwant\n%s", got, want)
	}
}
