//go:build tools

// Package tools pins the Pulumi CLI that scripts/tools.sh builds
// (github.com/pulumi/pulumi/pkg/v3/cmd/pulumi) and the SDK module whose
// source tree also ships the Python helper scripts copied next to it.
package tools

import (
	_ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
	_ "github.com/pulumi/pulumi/sdk/v3/go/common/version"
)
