package mcp

import (
	"testing"

	"github.com/stockade/stockade/test/testkit"
)

// TestMain isolates the environment (testkit.Main).
func TestMain(m *testing.M) { testkit.Main(m) }
