package central_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/natstest"
)

// Partition must be nats-server's {{partition(n, …)}} of the store token,
// so a server mapping and the generated imports agree on every store.
func TestPartitionIsTheServers(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7, 16, central.MaxPartitions} {
		tr, err := server.NewSubjectTransform("rx.mv.*.*", fmt.Sprintf("p.{{partition(%d,1)}}", n))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2000 {
			store := fmt.Sprintf("S%04d", i)
			got, err := tr.Match("rx.mv." + store + ".k")
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("p.%d", central.Partition(store, n)); got != want {
				t.Fatalf("n=%d store %s: server maps to %s, Partition says %s", n, store, got, want)
			}
		}
	}
	if central.Partition("S0001", 1) != 0 || central.Partition("S0001", 0) != 0 {
		t.Error("one partition must be partition 0")
	}
}

func TestLayoutNames(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"one partition's stream", central.MovementStream(0, 1), "RX_MOVEMENTS"},
		{"partition 3 of 4", central.MovementStream(3, 4), "RX_MOVEMENTS_3"},
		{"one partition's archive", central.ArchiveStream(0, 1), "RX_ARCHIVE"},
		{"archive 3 of 4", central.ArchiveStream(3, 4), "RX_ARCHIVE_3"},
		{"one partition's subject", central.PartitionSubject(0, 1, "S1", "k"), "rx.mv.S1.k"},
		{"partitioned subject", central.PartitionSubject(2, 4, "S1", "k"), "rx.mvp.2.S1.k"},
		{"one partition's filter", central.PartitionSubjects(0, 1), "rx.mv.>"},
		{"partitioned filter", central.PartitionSubjects(2, 4), "rx.mvp.2.>"},
		{"partitioned direct get", central.PartitionDirectGetSubject(2, 4, "S1", ">"), "$JS.API.DIRECT.GET.RX_MOVEMENTS_2.rx.mvp.2.S1.>"},
		{"archive subject", central.ArchiveSubject("S1"), "rx.ar.S1"},
		{"key of a msg id", central.KeyOfMsgID(central.MsgID("0123", "abcdef")), "0123"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	if got, want := central.ArchiveStreams(1), []string{"RX_ARCHIVE"}; !slices.Equal(got, want) {
		t.Errorf("ArchiveStreams(1) = %q, want %q", got, want)
	}
	if got, want := central.ArchiveStreams(3), []string{"RX_ARCHIVE", "RX_ARCHIVE_0", "RX_ARCHIVE_1", "RX_ARCHIVE_2"}; !slices.Equal(got, want) {
		t.Errorf("ArchiveStreams(3) = %q, want %q", got, want)
	}
	for name, want := range map[string]bool{"RX_ARCHIVE": true, "RX_ARCHIVE_0": true, "RX_ARCHIVE_63": true,
		"RX_ARCHIVE_64": false, "RX_ARCHIVE_01": false, "RX_ARCHIVE_": false, "RX_ARCHIVEX": false, "RX_MOVEMENTS": false} {
		if got := central.IsArchiveStream(name); got != want {
			t.Errorf("IsArchiveStream(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestArchiveIsSourced stores movements as agents do and finds them in the
// archive under their store's one subject, with the headers reconciliation
// reads; the archive refuses deletes and purges.
func TestArchiveIsSourced(t *testing.T) {
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprintf("partitions=%d", n), func(t *testing.T) {
			srv := natstest.StartHub(t, natstest.WithSkipProvision())
			nc := natstest.Connect(t, srv.URL())
			js := natstest.JetStream(t, nc)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const store = "S0042"
			p := central.Partition(store, n)
			o := central.StreamOptions{Partitions: n, Partition: p}
			if _, err := js.CreateStream(ctx, central.StreamConfig(o)); err != nil {
				t.Fatal(err)
			}
			arch, err := js.CreateStream(ctx, central.ArchiveConfig(o))
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 3; i++ {
				m := central.Message{Store: store, Key: fmt.Sprintf("%032x", i), Digest: fmt.Sprintf("%064x", i), Seq: uint64(i), EnqueuedAt: time.Now()}
				msg := m.Msg()
				msg.Subject = central.PartitionSubject(p, n, store, m.Key)
				if _, err := js.PublishMsg(ctx, msg); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				info, err := arch.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if info.State.Msgs == 3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("archive holds %d messages after 20 s, want 3 (awaited: the source copying them)", info.State.Msgs)
				}
				time.Sleep(20 * time.Millisecond)
			}
			for seq := uint64(1); seq <= 3; seq++ {
				m, err := arch.GetMsg(ctx, seq)
				if err != nil {
					t.Fatal(err)
				}
				if m.Subject != central.ArchiveSubject(store) || m.Header.Get(central.HeaderSeq) != fmt.Sprint(seq) ||
					central.KeyOfMsgID(m.Header.Get(central.HeaderMsgID)) != fmt.Sprintf("%032x", seq) {
					t.Errorf("archive message %d: subject %q headers %v", seq, m.Subject, m.Header)
				}
			}
			if err := arch.DeleteMsg(ctx, 1); err == nil {
				t.Error("the archive let a message be deleted")
			}
			if err := arch.Purge(ctx); err == nil {
				t.Error("the archive let itself be purged")
			}
		})
	}
}
