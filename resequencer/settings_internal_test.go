package resequencer

import (
	"testing"

	"github.com/lockreg/lockreg/internal/grouphandler/settingstest"
)

func TestSettingsCopyEverySharedField(t *testing.T) {
	settingstest.CheckCopy(t, Config.settings)
}
