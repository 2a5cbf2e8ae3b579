package daemon

import (
	"errors"
	"log/slog"
	"time"

	"github.com/rxedge/agent/queue"
)

// compactAtStart compacts the data file before the agent opens it, when
// most of it is free (queue.CompactionNeeded: more than half and more than
// 64 MiB), and removes the leftover of an interrupted compaction. Nothing
// here stops the start-up: when the check or the compaction fails, the
// file is as it was and the agent runs on it. While it compacts the agent
// does not yet accept movements; a drained gigabyte takes seconds.
func compactAtStart(path string, log *slog.Logger) {
	need, sp, err := queue.CompactionNeeded(path)
	if err != nil {
		// A locked file is reported by the open that follows.
		if !errors.Is(err, queue.ErrLocked) {
			log.Warn("COMPACTION_CHECK_FAILED", "error", err.Error())
		}
		return
	}
	if !need {
		return
	}
	log.Info("COMPACTING", "file_bytes", sp.FileSize, "free_bytes", sp.Free)
	res, err := queue.Compact(path, queue.CompactOptions{Actor: queue.ActorAgent, Reason: "automatic at start-up: most of the file was free"})
	if errors.Is(err, queue.ErrLocked) {
		return
	}
	if err != nil && !errors.Is(err, queue.ErrNotJournaled) {
		log.Warn("COMPACTION_FAILED", "error", err.Error())
		return
	}
	if err != nil {
		log.Warn("COMPACTION_NOT_JOURNALED", "error", err.Error())
	}
	log.Info("COMPACTED", "before", res.Before, "after", res.After, "duration", res.Duration.Round(time.Millisecond).String())
}
