package etcdlock_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/etcdlock"
)

// The tests share one three-member cluster (see cluster_test.go), started
// by the first test that needs it and stopped by TestMain; a test that
// stops members starts a cluster of its own.

var (
	sharedOnce sync.Once
	shared     *cluster
	sharedErr  error
	stopShared = func() {}
)

// sharedCluster returns the cluster the tests share, starting it first.
func sharedCluster(t testing.TB) *cluster {
	t.Helper()
	startShared()
	if sharedErr != nil {
		t.Fatalf("starting the shared etcd cluster: %v", sharedErr)
	}
	return shared
}

func startShared() {
	sharedOnce.Do(func() {
		var st stopper
		shared = startClusterOn(&st, 3)
		sharedErr = st.err
		stopShared = st.run
	})
}

// sharedClient returns a client of the shared cluster as root, made once:
// authenticating a client costs a bcrypt check of the password, most of
// a second under the race detector.
func sharedClient(t testing.TB) *clientv3.Client {
	t.Helper()
	cl := sharedCluster(t)
	sharedCliOnce.Do(func() {
		sharedCli, sharedCliErr = clientv3.New(clientConfig(cl.endpoints(), "root", rootPassword))
	})
	if sharedCliErr != nil {
		t.Fatalf("etcd client of the shared cluster: %v", sharedCliErr)
	}
	return sharedCli
}

var (
	sharedCliOnce sync.Once
	sharedCli     *clientv3.Client
	sharedCliErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedCli != nil {
		sharedCli.Close()
	}
	stopShared()
	if code == 0 {
		// No goroutine needs ignoring: once every member and client is
		// closed, etcd's server and client leave none behind.
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func randomRegion() string { return "test-" + uuid.NewString() }

// newRepo returns a repository on c in a random region of its own (a later
// WithRegion in opts wins), closed when t ends.
func newRepo(t testing.TB, c *clientv3.Client, opts ...etcdlock.Option) *etcdlock.Repository {
	t.Helper()
	opts = append([]etcdlock.Option{etcdlock.WithRegion(randomRegion()), etcdlock.WithErrorHandler(func(error) {})}, opts...)
	r, err := etcdlock.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("closing repository: %v", err)
		}
	})
	return r
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// exampleClient returns a client of the shared cluster for the examples,
// which have no testing.T: it starts the cluster if no test did.
func exampleClient() *clientv3.Client {
	startShared()
	if sharedErr != nil {
		panic(sharedErr)
	}
	cli, err := clientv3.New(clientConfig(shared.endpoints(), "root", rootPassword))
	if err != nil {
		panic(err)
	}
	return cli
}
