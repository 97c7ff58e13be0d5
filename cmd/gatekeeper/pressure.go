package main

import (
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// pressureSettings maps the policy's sources onto pressure.Settings.
func pressureSettings(c *config.Config) pressure.Settings {
	s := pressure.Settings{
		Interval:   c.Pressure.Interval,
		StaleAfter: c.Pressure.StaleAfter,
	}
	for _, src := range c.Pressure.Sources {
		s.Sources = append(s.Sources, sourceSettings(src))
	}
	for _, u := range c.Upstreams {
		us := pressure.UpstreamSettings{Name: u.Name, GPUs: u.GPUs}
		for _, src := range u.Sources {
			us.Sources = append(us.Sources, sourceSettings(src))
		}
		s.Upstreams = append(s.Upstreams, us)
	}
	return s
}

// pressureSettings is pressureSettings(c) with the app's source client.
func (a *app) pressureSettings(c *config.Config) pressure.Settings {
	s := pressureSettings(c)
	s.HTTPClient = a.opts.sources
	return s
}

func sourceSettings(s config.Source) pressure.SourceSettings {
	return pressure.SourceSettings{Kind: pressure.Kind(s.Kind), URL: s.URL, Name: s.Name, Timeout: s.Timeout}
}
