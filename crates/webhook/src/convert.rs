//! The CRD conversion endpoint (`/convert`): converts every object of a ConversionReview to the desired
//! apps.kruise.io version, or fails the whole review with the reason.

use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};

/// Answers one ConversionReview.
pub fn review(review: ConversionReview) -> (ConversionReview, bool) {
    let request = match ConversionRequest::from_review(review) {
        Ok(request) => request,
        Err(_) => {
            let status = Status::failure("malformed ConversionReview: no request", "BadRequest");
            return (ConversionResponse::invalid(status).into_review(), false);
        }
    };
    let desired = request.desired_api_version.clone();
    let objects = request.objects.clone();
    let converted: Result<Vec<_>, _> = objects
        .into_iter()
        .map(|object| kruise_api::kinds::convert(object, &desired))
        .collect();
    let response = ConversionResponse::for_request(request);
    match converted {
        Ok(objects) => (response.success(objects).into_review(), true),
        Err(error) => (
            response
                .failure(Status::failure(&error.to_string(), "ConversionFailed"))
                .into_review(),
            false,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn converts_every_object() {
        let review_in: ConversionReview = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": "u",
                "desiredAPIVersion": "apps.kruise.io/v1alpha1",
                "objects": [{
                    "apiVersion": "apps.kruise.io/v1beta1", "kind": "BroadcastJob",
                    "metadata": {"name": "a"},
                    "spec": {"template": {}, "completionPolicy": {}}
                }]
            }
        }))
        .expect("decodes");
        let (out, ok) = review(review_in);
        assert!(ok);
        let out = serde_json::to_value(out).expect("encodes");
        assert_eq!(out["response"]["uid"], "u");
        assert_eq!(out["response"]["result"]["status"], "Success");
        assert_eq!(
            out["response"]["convertedObjects"][0]["apiVersion"],
            "apps.kruise.io/v1alpha1"
        );
    }

    #[test]
    fn unknown_kind_fails_the_review() {
        let review_in: ConversionReview = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "u", "desiredAPIVersion": "apps.kruise.io/v1alpha1",
                "objects": [{"apiVersion": "apps.kruise.io/v1beta1", "kind": "Nope", "metadata": {"name": "a"}}]}
        }))
        .expect("decodes");
        let (out, ok) = review(review_in);
        assert!(!ok);
        let out = serde_json::to_value(out).expect("encodes");
        assert_eq!(out["response"]["result"]["status"], "Failure");
    }
}
