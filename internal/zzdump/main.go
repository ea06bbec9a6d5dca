package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/lockreg/lockreg/internal/dialect"
)

func main() {
	d := dialect.Postgres
	all := append(append([]string(nil), dialect.CustomParams...), dialect.Retention, dialect.Batch)
	emit := func(name, t string) {
		q := d.MustCompile(t, "INT_", all...)
		s := q.SQL
		for i := len(q.Names); i >= 1; i-- {
			s = strings.ReplaceAll(s, "$"+strconv.Itoa(i), ":"+q.Names[i-1])
		}
		os.WriteFile("/tmp/pb/"+name+".sql", []byte(s+";\n"), 0o644)
	}
	emit("acquire", d.Lock.Acquire)
	emit("acquirewait", d.Lock.Queue.AcquireOrWait)
	emit("release", d.Lock.Queue.Release)
	emit("release_plain", dialect.Release)
	fmt.Println("ok")
}
