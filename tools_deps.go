//go:build tools

package tools

import (
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/google/uuid"
	_ "github.com/hashicorp/golang-lru/v2/simplelru"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	_ "go.uber.org/goleak"
	_ "modernc.org/sqlite"
)
