package etcdlock_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockreg/lockreg/etcdlock"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// TestConformance runs the shared repository suite on the three-member
// cluster, in a region of its own. Its DeleteExpired deletes every key of
// the region, as a cluster restored from an older snapshot would lose
// them: tokens still increase, since they are revisions; its missing
// storage is a client whose user has no role, so that every request is
// refused.
func TestConformance(t *testing.T) {
	cl := sharedCluster(t)
	c := sharedClient(t)
	region := randomRegion()
	registrytest.Run(t, registrytest.Backend{
		NewRepository: func(t testing.TB) registry.Repository {
			return newRepo(t, c, etcdlock.WithRegion(region))
		},
		DeleteExpired: func(ctx context.Context) error {
			_, err := c.Delete(ctx, etcdlock.DefaultPrefix+region+"\x00", clientv3.WithPrefix())
			return err
		},
		NewMissingStorage: func(t testing.TB) registry.Repository {
			nobody := newClientAs(t, cl.endpoints(), "nobody", nobodyPassword)
			r, err := etcdlock.New(nobody, etcdlock.WithRegion(region), etcdlock.WithErrorHandler(func(error) {}))
			if err != nil {
				t.Fatal(err)
			}
			return r // the suite closes it, which fails as its Lock did
		},
	})
}
