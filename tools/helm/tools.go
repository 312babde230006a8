//go:build tools

// Package tools pins the Helm CLI that `make helm` builds (chart lint, template and the install tests).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
