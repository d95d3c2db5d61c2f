//go:build tools

// Package tools pins the release tools that scripts/tools.sh builds: helm
// (helm.sh/helm/v3/cmd/helm: packages and pushes the chart), syft
// (github.com/anchore/syft/cmd/syft: the image's SBOM) and actionlint
// (github.com/rhysd/actionlint/cmd/actionlint: checks .github/workflows).
package tools

import (
	_ "github.com/anchore/syft/cmd/syft"
	_ "github.com/rhysd/actionlint/cmd/actionlint"
	_ "helm.sh/helm/v3/cmd/helm"
)
