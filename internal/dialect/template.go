package dialect

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrTemplate reports a statement that does not follow the templating
// rule; the error wrapping it says where.
var ErrTemplate = errors.New("invalid statement template")

// Query is a compiled statement: SQL with the dialect's positional
// placeholders, and the names of the parameters they stand for, in order.
// A query with a {list} renders its SQL per call with WithList.
type Query struct {
	SQL   string
	Names []string // "" marks the {list}

	// chunks are the SQL around the placeholders: chunks[i] precedes
	// the placeholder of Names[i].
	chunks []string
	dollar bool
}

// Compile compiles template for the dialect and the table prefix. The one
// rule, for every statement lockreg runs and every custom query:
//
//	{prefix}    the table prefix, so {prefix}LOCK names the lock table
//	{now}       the database's current UTC wall time, in the tables' format
//	{past}      a moment before {now}: the expiry a release writes
//	{clock}     the database's clock in microseconds since 1970
//	{now+:p}    {now} plus parameter p, in microseconds; {now-:p} minus it
//	{list}      a parenthesised list of placeholders, as many as given per call
//	:name       parameter name, a letter or _ followed by letters, digits, _
//
// Parameters and macros are read as Spring's NamedParameterJdbcTemplate
// reads parameters: not inside quotes ('...', "...", `...`) or comments,
// and "::" (a PostgreSQL cast) is no parameter. Every parameter must be
// one of params; it may occur more than once, and each occurrence is a
// placeholder of its own.
func (d *Dialect) Compile(template, prefix string, params ...string) (Query, error) {
	q := Query{dollar: d.dollar}
	var b strings.Builder
	param := func(name string) error {
		if name != "" && !slices.Contains(params, name) {
			return fmt.Errorf("%w: unknown parameter :%s; the parameters are %s", ErrTemplate, name, list(params))
		}
		q.chunks = append(q.chunks, b.String())
		q.Names = append(q.Names, name)
		b.Reset()
		return nil
	}
	for i := 0; i < len(template); {
		c := template[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			end := strings.IndexByte(template[i+1:], c)
			if end < 0 {
				return Query{}, fmt.Errorf("%w: unterminated quote at byte %d", ErrTemplate, i)
			}
			b.WriteString(template[i : i+end+2])
			i += end + 2
		case strings.HasPrefix(template[i:], "--"):
			end := strings.IndexByte(template[i:], '\n')
			if end < 0 {
				end = len(template) - i
			}
			b.WriteString(template[i : i+end])
			i += end
		case strings.HasPrefix(template[i:], "/*"):
			end := strings.Index(template[i:], "*/")
			if end < 0 {
				return Query{}, fmt.Errorf("%w: unterminated comment at byte %d", ErrTemplate, i)
			}
			b.WriteString(template[i : i+end+2])
			i += end + 2
		case strings.HasPrefix(template[i:], "::"):
			b.WriteString("::")
			i += 2
		case c == ':' && i+1 < len(template) && isNameStart(template[i+1]):
			n := nameLen(template[i+1:])
			if err := param(template[i+1 : i+1+n]); err != nil {
				return Query{}, err
			}
			i += 1 + n
		case c == '{':
			end := strings.IndexByte(template[i:], '}')
			if end < 0 {
				return Query{}, fmt.Errorf("%w: unterminated macro at byte %d", ErrTemplate, i)
			}
			macro := template[i+1 : i+end]
			i += end + 1
			switch {
			case macro == "prefix":
				b.WriteString(prefix)
			case macro == "now":
				b.WriteString(d.now)
			case macro == "past":
				b.WriteString(d.past)
			case macro == "clock":
				b.WriteString(d.clock)
			case macro == "list":
				if slices.Contains(q.Names, "") {
					return Query{}, fmt.Errorf("%w: more than one {list}", ErrTemplate)
				}
				param("")
			case shiftMacro.MatchString(macro):
				around := d.plus
				if macro[3] == '-' {
					around = d.minus
				}
				b.WriteString(around[0])
				if err := param(macro[5:]); err != nil {
					return Query{}, err
				}
				b.WriteString(around[1])
			default:
				return Query{}, fmt.Errorf("%w: unknown macro {%s}; the macros are {prefix}, {now}, {past}, {clock}, "+
					"{now+:name}, {now-:name} and {list}", ErrTemplate, macro)
			}
		default:
			b.WriteByte(c)
			i++
		}
	}
	q.chunks = append(q.chunks, b.String())
	if !slices.Contains(q.Names, "") {
		q.SQL = q.WithList(0)
	}
	return q, nil
}

// shiftMacro matches {now+:name} and {now-:name} without the braces.
var shiftMacro = regexp.MustCompile(`^now[+-]:[A-Za-z_][A-Za-z0-9_]*$`)

// WithList returns the query's SQL with n placeholders in its {list}.
func (q Query) WithList(n int) string {
	var b strings.Builder
	k := 0
	mark := func() {
		k++
		if q.dollar {
			b.WriteString("$" + strconv.Itoa(k))
		} else {
			b.WriteByte('?')
		}
	}
	for i, name := range q.Names {
		b.WriteString(q.chunks[i])
		if name != "" {
			mark()
			continue
		}
		b.WriteByte('(')
		for j := range n {
			if j > 0 {
				b.WriteString(", ")
			}
			mark()
		}
		b.WriteByte(')')
	}
	b.WriteString(q.chunks[len(q.chunks)-1])
	return b.String()
}

// Args returns the arguments of the query: value(name) for each parameter
// and the values of list in the {list}.
func (q Query) Args(value func(name string) any, list ...any) []any {
	args := make([]any, 0, len(q.Names)+len(list))
	for _, name := range q.Names {
		if name == "" {
			args = append(args, list...)
		} else {
			args = append(args, value(name))
		}
	}
	return args
}

// MustCompile is Compile for built-in statements, whose failure is a bug.
func (d *Dialect) MustCompile(template, prefix string, params ...string) Query {
	q, err := d.Compile(template, prefix, params...)
	if err != nil {
		panic(fmt.Sprintf("dialect %s: compiling a built-in statement: %v\n%s", d.Name, err, template))
	}
	return q
}

func isNameStart(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func nameLen(s string) int {
	n := 0
	for n < len(s) && (isNameStart(s[n]) || '0' <= s[n] && s[n] <= '9') {
		n++
	}
	return n
}

func list(params []string) string {
	if len(params) == 0 {
		return "none"
	}
	return ":" + strings.Join(params, ", :")
}
