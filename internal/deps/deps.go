package deps
import (
 _ "github.com/go-chi/chi/v5"
 _ "golang.org/x/time/rate"
 _ "github.com/sony/gobreaker/v2"
 _ "github.com/NVIDIA/go-nvml/pkg/nvml"
 _ "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/prometheus/client_golang/prometheus/promhttp"
 _ "github.com/prometheus/client_golang/prometheus/testutil"
 _ "github.com/prometheus/common/expfmt"
 _ "go.yaml.in/yaml/v3"
 _ "github.com/fsnotify/fsnotify"
)
