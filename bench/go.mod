module github.com/gatekeeper-dev/gatekeeper/bench

go 1.26.0

require (
	github.com/gatekeeper-dev/gatekeeper v0.0.0
	github.com/tsenart/vegeta/v12 v12.13.0
)

require (
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/rs/dnscache v0.0.0-20230804202142-fc85eb664529 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

// The driver shares its request bodies and quantile with gatekeeper's other
// traffic generators (sim/traffic, standard library only).
replace github.com/gatekeeper-dev/gatekeeper => ../
