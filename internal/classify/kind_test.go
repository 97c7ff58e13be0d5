package classify

import "testing"

func TestKindString(t *testing.T) {
	t.Parallel()
	want := map[Kind]string{KindModels: "models", KindCompletion: "completion", KindChat: "chat",
		KindResponses: "responses", KindEmbedding: "embedding", KindScore: "score", KindAudio: "audio", 200: "unknown"}
	for k, w := range want {
		if got := k.String(); got != w {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, w)
		}
	}
	if KindModels.inference() || !KindChat.inference() {
		t.Errorf("Inference: models %v, chat %v; want false, true", KindModels.inference(), KindChat.inference())
	}
	if KindModels.JSON() || KindAudio.JSON() || !KindChat.JSON() || !KindScore.JSON() {
		t.Errorf("JSON: models %v, audio %v, chat %v, score %v; want false, false, true, true",
			KindModels.JSON(), KindAudio.JSON(), KindChat.JSON(), KindScore.JSON())
	}
}
